//! Admin operations: topics, configs, offsets, cluster and groups.
