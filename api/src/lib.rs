//! comb-api: the `Comb` custom resource and the value types around it.
//!
//! Pure data and pure functions: this crate must never depend on a client or an async runtime,
//! so that every other crate (and other programs) can use the types cheaply.
