//! The `convert` binary through its command line, one test binary for all
//! of it: conversions, the frictions of issue 16, the product's promises,
//! and `validate`/`inspect`.

#[path = "../support/mod.rs"]
mod support;

mod convert;
mod friction;
mod product;
mod validate;
