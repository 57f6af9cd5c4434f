//! fjall-backed state stores.
