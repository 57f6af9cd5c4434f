use super::*;
use crate::error::ProcessError;
use crate::processor::ProcessorContext;

struct Pass;

impl Processor<String, String> for Pass {
    type KOut = String;
    type VOut = String;
    fn process(
        &mut self,
        ctx: &mut ProcessorContext<'_, String, String>,
        r: Record<String, String>,
    ) -> std::result::Result<(), ProcessError> {
        ctx.forward(r);
        Ok(())
    }
}

const NO_STORES: &[&dyn StoreName] = &[];

fn invalid(b: TopologyBuilder) -> String {
    match b.build() {
        Err(StreamsError::InvalidTopology(msg)) => msg,
        Err(e) => panic!("unexpected error {e}"),
        Ok(t) => panic!("built an invalid topology:\n{}", t.describe()),
    }
}

#[test]
fn an_unknown_store_is_refused_by_name() {
    let mut b = TopologyBuilder::new();
    let src = b.source::<String, String>("src", &["in"]);
    b.processor("p", &[&src], || Pass, &[&"missing"]);
    let msg = invalid(b);
    assert!(
        msg.contains("processor p uses unknown store missing"),
        "{msg}"
    );
}

#[test]
fn an_unconnected_sink_and_an_orphan_processor_are_refused() {
    let mut b = TopologyBuilder::new();
    b.source::<String, String>("src", &["in"]);
    b.sink::<String, String>("lonely", &[], "out");
    b.processor::<String, String, _, _>("orphan", &[], || Pass, NO_STORES);
    let msg = invalid(b);
    assert!(msg.contains("sink lonely is not connected"), "{msg}");
    assert!(msg.contains("processor orphan has no parent"), "{msg}");
}

#[test]
fn duplicate_names_and_a_topic_read_twice_are_refused() {
    let mut b = TopologyBuilder::new();
    b.source::<String, String>("src", &["in"]);
    b.source::<String, String>("src", &["in"]);
    let msg = invalid(b);
    assert!(msg.contains("two nodes are named src"), "{msg}");
    assert!(
        msg.contains("topic in is read by both src and src"),
        "{msg}"
    );

    let mut b = TopologyBuilder::new();
    let s = b.source::<String, String>("a", &["in"]);
    let c = b.kv_store::<String, String>("s");
    b.kv_store::<String, String>("s");
    b.processor("p", &[&s], || Pass, &[&c]);
    assert!(invalid(b).contains("two stores are named s"));
}

#[test]
fn no_source_and_an_unused_store_are_refused() {
    let mut b = TopologyBuilder::new();
    b.kv_store::<String, String>("unused");
    let msg = invalid(b);
    assert!(msg.contains("no source"), "{msg}");
    assert!(
        msg.contains("store unused is used by no processor"),
        "{msg}"
    );
}

#[test]
fn a_shared_store_joins_two_sources_into_one_subtopology() {
    let mut b = TopologyBuilder::new();
    let store = b.kv_store::<String, String>("shared");
    let a = b.source::<String, String>("a", &["left"]);
    let c = b.source::<String, String>("c", &["right"]);
    b.source::<String, String>("z", &["other"]);
    b.processor("pa", &[&a], || Pass, &[&store]);
    b.processor("pc", &[&c], || Pass, &[&store]);
    let t = b.build().unwrap();
    assert_eq!(t.subtopology_count(), 2);
    assert_eq!(t.source_topics(0, "app"), vec!["left", "right"]);
    assert_eq!(t.source_topics(1, "app"), vec!["other"]);
}

#[test]
fn co_partitioning_is_checked_and_repartition_counts_follow_upstream() {
    let mut b = TopologyBuilder::new();
    let store = b.kv_store::<String, String>("shared");
    let a = b.source::<String, String>("a", &["left"]);
    let c = b.source::<String, String>("c", &["right"]);
    let pa = b.processor("pa", &[&a], || Pass, &[&store]);
    b.processor("pc", &[&c], || Pass, &[&store]);
    let r = b.repartition("by-x", &[&pa], None);
    b.sink("out", &[&r], "out");
    let t = b.build().unwrap();

    let mut counts = BTreeMap::from([("left".to_owned(), 4), ("right".to_owned(), 3)]);
    match t.partition_counts(&counts) {
        Err(StreamsError::Topic { reason, .. }) => {
            assert!(reason.contains("co-partitioned"), "{reason}")
        }
        other => panic!("expected a co-partitioning error, got {other:?}"),
    }
    counts.insert("right".into(), 4);
    let by_sub = t.partition_counts(&counts).unwrap();
    assert_eq!(by_sub, BTreeMap::from([(0, 4), (1, 4)]));
    let internal = t.internal_topics("app", &by_sub);
    let names: Vec<_> = internal
        .iter()
        .map(|t| (t.name.as_str(), t.partitions))
        .collect();
    assert_eq!(
        names,
        vec![("app-shared-changelog", 4), ("app-by-x-repartition", 4)]
    );
    assert!(
        internal[0]
            .configs
            .contains(&("cleanup.policy".into(), "compact".into()))
    );

    counts.remove("left");
    assert!(matches!(
        t.partition_counts(&counts),
        Err(StreamsError::Topic { .. })
    ));
}

#[test]
fn window_changelogs_are_compacted_and_deleted_after_retention_plus_a_day() {
    let mut b = TopologyBuilder::new();
    let w = b.window_store::<String, ()>("seen", Duration::from_secs(3600));
    let s = b.source::<String, String>("s", &["cmds"]);
    b.processor("p", &[&s], || Pass, &[&w]);
    let t = b.build().unwrap();
    let internal = t.internal_topics("d", &BTreeMap::from([(0, 2)]));
    assert_eq!(internal[0].name, "d-seen-changelog");
    assert_eq!(
        internal[0].configs,
        vec![
            ("cleanup.policy".to_owned(), "compact,delete".to_owned()),
            (
                "retention.ms".to_owned(),
                (3_600_000u64 + 86_400_000).to_string()
            )
        ]
    );
}

#[test]
fn describe_names_every_node_store_and_edge() {
    let mut b = TopologyBuilder::new();
    let store = b.kv_store::<String, String>("counts");
    let s = b.source::<String, String>("src", &["in"]);
    let p = b.processor("count", &[&s], || Pass, &[&store]);
    b.sink("sink", &[&p], "out");
    let d = b.build().unwrap().describe();
    let expected = "Topologies:\n   Sub-topology: 0\n    Source: src (topics: [in], key: String, value: String)\n      --> count\n    Processor: count (stores: [counts])\n      --> sink\n      <-- src\n    Sink: sink (topic: out)\n      <-- count\n\n";
    assert_eq!(d, expected);
}

#[test]
fn a_pattern_source_resolves_to_matching_topics_and_fails_on_none() {
    let build = || {
        let mut b = TopologyBuilder::new();
        let src = b.source_pattern::<String, String>("in", "orders-.*");
        b.sink("out", &[&src], "orders-all");
        b.build().unwrap()
    };
    let mut t = build();
    let existing: Vec<String> = [
        "orders-eu",
        "orders-us",
        "app-orders-x-changelog",
        "ordersx",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    t.resolve_patterns(&existing, "app").unwrap();
    assert_eq!(t.external_source_topics(), vec!["orders-eu", "orders-us"]);
    let mut none = build();
    let err = none
        .resolve_patterns(&["payments".to_owned()], "app")
        .unwrap_err();
    assert!(err.to_string().contains("matches no topic"), "{err}");
    let mut b = TopologyBuilder::new();
    let bad = b.source_pattern::<String, String>("in", "(");
    b.sink("out", &[&bad], "x");
    assert!(b.build().is_err());
}
