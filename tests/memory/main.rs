//! Memory bounds measured with a counting global allocator (`alloc`): the
//! bytes a run requests, deterministic where RSS is not. The counters are
//! process-wide, so these tests have a binary of their own, and every test
//! in it holds [`alloc::serial`] from its first line, not only while it
//! measures: a test building a large input beside a measuring one would
//! count in that one's peak.
//!
//! Print the measured peaks with `cargo test --test memory -- --nocapture`.

#[path = "../support/mod.rs"]
mod support;

mod alloc;

mod bound;
mod formats;
mod gguf;
mod giants;
mod header;
mod hostile;
mod limits;
mod numpy;
mod plan;
mod quantized;
mod records;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;
