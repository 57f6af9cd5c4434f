//! Consumer-group membership and assignors.
