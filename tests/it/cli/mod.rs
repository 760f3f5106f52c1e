//! The `convert` binary through its command line: conversions, the
//! frictions of issue 16, the product's promises, `validate`/`inspect`,
//! and the fan-out's `--shard K`/`--index-only`.

mod convert;
mod fanout;
mod friction;
mod newcomer;
mod newcomer_round4;
mod product;
mod urls;
mod validate;
