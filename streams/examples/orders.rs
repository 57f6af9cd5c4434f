//! Orders enriched with a customer table (a stream-table join), a
//! weir-streams DSL application.
//!
//! ```text
//! orders run --bootstrap HOST:PORT --application-id ID --state-dir DIR --customers TOPIC
//!            --input TOPIC --output TOPIC
//!            [--guarantee at-least-once|exactly-once] [--threads N] [--standbys N]
//!            [--instance-id ID] [-X key=value]...
//! orders check
//! ```
//!
//! `run` reads customers (key = customer id, value = name) as a table and
//! orders (key = customer id, value = "order-id,amount") as a stream, and
//! writes each order of a known customer as "order-id,name,amount". `check`
//! runs it on an embedded cluster under exactly-once with one instance
//! crashing mid-run, waits until the instances' `customers` stores hold
//! every customer (interactive queries), and checks that every order comes
//! out once, enriched.

mod apps;
mod cli;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use cli::embedded::{Embedded, Input, compare, run_check, wait_for};

/// Orders enriched with customer names.
#[derive(Debug, Parser)]
#[command(name = "orders", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the application against a cluster.
    Run {
        /// The customers topic (the table).
        #[arg(long)]
        customers: String,
        #[command(flatten)]
        common: Box<cli::Common>,
    },
    /// Run it on an embedded cluster with a crash, and check the result.
    Check,
}

const CUSTOMERS: usize = 40;
const ORDERS: usize = 600;

async fn check() -> Result<String, String> {
    let (customers, orders, output) = ("customers", "orders", "enriched-orders");
    let kit = Embedded::start("orders", &[customers, orders, output], 4).await?;
    let names: Vec<Input> = (0..CUSTOMERS)
        .map(|c| (format!("c{c}"), Some(format!("Customer {c}")), 1_000))
        .collect();
    // Every fifth order is for a customer that does not exist.
    let all_orders: Vec<Input> = (0..ORDERS)
        .map(|i| {
            let customer = (i * 13) % (CUSTOMERS + CUSTOMERS / 4);
            (
                format!("c{customer}"),
                Some(format!("o{i},{}", i % 97)),
                2_000 + i as i64,
            )
        })
        .collect();
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    for (customer, order, _) in &all_orders {
        let n: usize = customer[1..]
            .parse()
            .map_err(|_| "customer id".to_string())?;
        if let (true, Some((id, amount))) = (
            n < CUSTOMERS,
            order.as_deref().and_then(|o| o.split_once(',')),
        ) {
            expected.insert(
                id.to_owned(),
                format!("{customer}|{id},Customer {n},{amount}"),
            );
        }
    }
    let topology = || apps::orders::topology(customers, orders, output).map_err(|e| e.to_string());
    kit.produce(customers, &names).await?;
    let a = kit.instance("a", topology()?).await?;
    let b = kit.instance("b", topology()?).await?;
    wait_for("every customer in the tables", || async {
        let mut held = 0;
        for instance in [&a, &b] {
            let store = instance
                .kv_store::<String, String>(apps::orders::STORE)
                .map_err(|e| e.to_string())?;
            held += store.all().map_err(|e| e.to_string())?.len();
        }
        Ok(held == CUSTOMERS)
    })
    .await?;
    println!(
        "the customers table holds all {CUSTOMERS} customers (interactive queries on a and b)"
    );
    let (head, tail) = all_orders.split_at(ORDERS / 2);
    kit.produce(orders, head).await?;
    wait_for("the first enriched orders", || async {
        Ok(kit.read_committed(output).await?.len() > 50)
    })
    .await?;
    kit.crash("a", a).await?;
    let c = kit.instance("c", topology()?).await?;
    kit.produce(orders, tail).await?;
    wait_for("every enriched order", || async {
        Ok(kit.read_committed(output).await?.len() >= expected.len())
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut got = BTreeMap::new();
    for (customer, value) in kit.read_committed(output).await? {
        let id = value.split(',').next().unwrap_or_default().to_owned();
        if got
            .insert(id.clone(), format!("{customer}|{value}"))
            .is_some()
        {
            return Err(format!("order {id} came out twice"));
        }
    }
    compare(&got, &expected)?;
    b.close(Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    c.close(Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "{ORDERS} orders, {} of known customers enriched once each across a crash, the others dropped",
        expected.len()
    ))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Run { customers, common } => {
            cli::init_logs();
            let topology = apps::orders::topology(&customers, &common.input, &common.output);
            cli::run("orders", topology, common.config(), common.metrics_addr)
        }
        Command::Check => {
            // A crash is part of the check: its connection warnings are noise.
            cli::init_logs_at("error");
            run_check("orders", check)
        }
    }
}
