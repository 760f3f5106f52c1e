//! Object storage, one test binary: against a local S3 server (moto) through
//! the binary (`s3`), and `http(s)://` inputs from a ranged HTTP server of
//! the test's own (`http`). The ETag test sets the process's environment,
//! so it has a binary of its own (object_store_etag.rs).

#[path = "../support/mod.rs"]
mod support;

mod http;
mod s3;
