//! The `convert` binary through its command line, one test binary for all
//! of it: conversions, the frictions of issue 16, the product's promises,
//! `validate`/`inspect`, and the fan-out's `--shard K`/`--index-only`.

#[path = "../support/mod.rs"]
mod support;

mod convert;
mod fanout;
mod friction;
mod newcomer;
mod product;
mod urls;
mod validate;
