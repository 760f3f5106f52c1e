//! Object storage: against a local S3 server (moto) through the binary
//! (`s3`), through the library with an object replaced mid-read (`etag`,
//! in a child process of its own: the object store reads its configuration
//! from the environment), quantized checkpoints as objects (`quantized`),
//! and `http(s)://` inputs from a ranged HTTP server
//! of the test's own (`http`).

mod etag;
mod http;
mod quantized;
mod s3;
