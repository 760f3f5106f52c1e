//! The integration tests, one test binary for all of them but those that
//! measure the heap (`tests/memory/`), the fuzz regressions (whose panic
//! hook counts every thread's panics) and the layer check (`layers.rs`).
//! One binary links the crate once instead of once per file: see the
//! README's "Tests" for what that saves.
//!
//! Every module shares one process: a test that needs its own environment
//! runs a child of this binary (see `object_store::etag`), and none
//! changes the working directory.

#[path = "../support/mod.rs"]
mod support;

mod casts;
mod cli;
mod conformance;
mod differential;
mod faults;
mod gguf;
mod input_bounds;
mod ndarray;
mod numpy;
mod object_store;
mod output_safety;
mod parallel_inflate;
mod pipeline;
mod pytorch;
mod quantized;
mod raw;
mod readme_recipes;
mod real_clients;
mod sink_adversaries;
mod spec;
mod writer;
