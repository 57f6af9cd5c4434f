//! `weir topics list|create|delete|describe`.

use weir_client::admin::{ConfigResource, NewTopic};

use crate::args::{ConnectArgs, TopicsCommand};
use crate::connect::{admin, topic};

/// Runs the command.
pub async fn run(command: TopicsCommand, connect: &ConnectArgs) -> Result<(), String> {
    match command {
        TopicsCommand::List => {
            let admin = admin(connect).await?;
            let mut topics = admin.list_topics().await.map_err(|e| e.to_string())?;
            topics.sort_by(|a, b| a.name.cmp(&b.name));
            for t in topics.iter().filter(|t| !t.is_internal) {
                println!("{}\t{} partitions", t.name, t.partitions.len());
            }
            Ok(())
        }
        TopicsCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            let admin = admin(connect).await?;
            let mut new =
                NewTopic::new(name.clone(), partitions).replication_factor(replication_factor);
            for c in &configs {
                let (k, v) = c
                    .split_once('=')
                    .ok_or_else(|| format!("--config {c}: expected KEY=VALUE"))?;
                new = new.config(k.trim(), v.trim());
            }
            admin
                .create_topic(new)
                .await
                .map_err(|e| format!("creating {name}: {e}"))?;
            println!("created {name}");
            Ok(())
        }
        TopicsCommand::Delete { name } => {
            let admin = admin(connect).await?;
            topic(&admin, &name).await?;
            admin
                .delete_topic(&name)
                .await
                .map_err(|e| format!("deleting {name}: {e}"))?;
            println!("deleted {name}");
            Ok(())
        }
        TopicsCommand::Describe { name } => {
            let admin = admin(connect).await?;
            let meta = topic(&admin, &name).await?;
            println!("topic\t{}", meta.name);
            for p in &meta.partitions {
                println!(
                    "partition\t{}\tleader {}\treplicas {:?}\tisr {:?}",
                    p.partition, p.leader, p.replicas, p.isr
                );
            }
            let configs = admin
                .describe_configs(&ConfigResource::Topic(name.clone()))
                .await
                .map_err(|e| format!("configs of {name}: {e}"))?;
            for c in configs {
                println!("config\t{}={}", c.name, c.value.as_deref().unwrap_or(""));
            }
            Ok(())
        }
    }
}
