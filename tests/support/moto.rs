//! A local S3 server for tests: moto's `moto_server`, found through
//! `SAFETENSORS_STREAM_S3_ENDPOINT` (set by `.ci/run`, which starts it), or
//! started here from `$MOTO_SERVER` or `moto_server` on the PATH on a free
//! port (stopped when the test process ends).
//!
//! The tests that need it are `#[ignore = "needs a local S3 server ..."]`: a plain `cargo test`
//! lists them as ignored rather than passed; `cargo test --test it
//! object_store -- --ignored` runs them, and there a server that
//! cannot be had is a failure, said at once when `moto_server` is not found.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The server's endpoint (`http://127.0.0.1:PORT`), or why there is none.
pub fn endpoint() -> Result<&'static str, &'static str> {
    static ENDPOINT: OnceLock<Result<String, String>> = OnceLock::new();
    match ENDPOINT.get_or_init(start) {
        Ok(e) => Ok(e.as_str()),
        Err(why) => Err(why.as_str()),
    }
}

/// The endpoint; a test run without one fails, saying why.
pub fn server(test: &str) -> &'static str {
    endpoint().unwrap_or_else(|why| panic!("{test}: no S3 test server: {why}"))
}

fn start() -> Result<String, String> {
    if let Ok(e) = std::env::var("SAFETENSORS_STREAM_S3_ENDPOINT") {
        return Ok(e);
    }
    spawn("")
}

/// A second server that checks credentials (moto's IAM auth, from the first
/// request on): every key this test suite uses is unknown to it.
pub fn checking_credentials() -> Result<&'static str, &'static str> {
    static ENDPOINT: OnceLock<Result<String, String>> = OnceLock::new();
    match ENDPOINT.get_or_init(|| spawn("INITIAL_NO_AUTH_ACTION_COUNT=0")) {
        Ok(e) => Ok(e.as_str()),
        Err(why) => Err(why.as_str()),
    }
}

/// Starts `moto_server` (with `env`, `NAME=VALUE` or empty) on a free port.
fn spawn(env: &str) -> Result<String, String> {
    let server = std::env::var("MOTO_SERVER").unwrap_or_else(|_| "moto_server".into());
    if !runnable(&server) {
        return Err(format!(
            "{server} not found (install moto[server], or set SAFETENSORS_STREAM_S3_ENDPOINT)"
        ));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    // The shell stops the server when this test process is gone.
    let script = format!(
        "{env} {server} -H 127.0.0.1 -p {port} >/dev/null 2>&1 & m=$!; \
         while kill -0 {pid} 2>/dev/null && kill -0 $m 2>/dev/null; do sleep 1; done; kill $m 2>/dev/null",
        pid = std::process::id()
    );
    Command::new("sh")
        .args(["-c", &script])
        .spawn()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(format!("http://127.0.0.1:{port}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "{server} did not start (install moto[server], or set SAFETENSORS_STREAM_S3_ENDPOINT)"
    ))
}

/// Whether `program` is a file, or found on the PATH: looked up before
/// waiting for a server that could never start.
fn runnable(program: &str) -> bool {
    let path = std::path::Path::new(program);
    if path.components().count() > 1 {
        return path.is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

/// The secret key the binary is given: it must appear in no message.
pub const SECRET: &str = "moto-secret-0042";

/// The environment the binary needs to reach the server.
pub fn env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", "AKIDMOTOTEST".into()),
        ("AWS_SECRET_ACCESS_KEY", SECRET.into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ENDPOINT", endpoint.into()),
        ("AWS_ALLOW_HTTP", "true".into()),
    ]
}

/// One plain HTTP request; the status and body. moto checks no signature,
/// only that one is there.
pub fn request(endpoint: &str, method: &str, target: &str) -> (u16, Vec<u8>) {
    request_with(endpoint, method, target, &[])
}

/// An object placed by a plain PUT (no conversion).
pub fn put(endpoint: &str, bucket: &str, key: &str, body: &[u8]) {
    let (status, reply) = request_with(endpoint, "PUT", &format!("/{bucket}/{key}"), body);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
}

fn request_with(endpoint: &str, method: &str, target: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let host = endpoint.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).unwrap();
    let auth = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, \
                SignedHeaders=host, Signature=00";
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {auth}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut response = Vec::new();
    s.read_to_end(&mut response).unwrap();
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP response");
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, response[split + 4..].to_vec())
}

/// A new, empty bucket with a name unique to this process and `tag`.
pub fn bucket(endpoint: &str, tag: &str) -> String {
    let name = format!("t-{}-{tag}", std::process::id());
    let (status, body) = request(endpoint, "PUT", &format!("/{name}"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    name
}

/// An object's bytes, or `None` when there is no such object.
pub fn get(endpoint: &str, bucket: &str, key: &str) -> Option<Vec<u8>> {
    let (status, body) = request(endpoint, "GET", &format!("/{bucket}/{key}"));
    match status {
        200 => Some(body),
        404 => None,
        other => panic!("GET {bucket}/{key}: HTTP {other}"),
    }
}

/// The keys in a bucket.
pub fn keys(endpoint: &str, bucket: &str) -> Vec<String> {
    let (_, body) = request(endpoint, "GET", &format!("/{bucket}?list-type=2"));
    tags(&String::from_utf8_lossy(&body), "Key")
}

/// Multipart uploads still open in a bucket (their keys).
pub fn open_uploads(endpoint: &str, bucket: &str) -> Vec<String> {
    let (_, body) = request(endpoint, "GET", &format!("/{bucket}?uploads"));
    tags(&String::from_utf8_lossy(&body), "Key")
}

/// Starts a multipart upload of `key` and leaves it open, as a killed run
/// does; its upload id.
pub fn start_upload(endpoint: &str, bucket: &str, key: &str) -> String {
    let (status, body) = request(endpoint, "POST", &format!("/{bucket}/{key}?uploads"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    tags(&String::from_utf8_lossy(&body), "UploadId")
        .pop()
        .expect("an upload id")
}

fn tags(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    xml.split(&open)
        .skip(1)
        .filter_map(|rest| rest.split(&close).next())
        .map(str::to_string)
        .collect()
}
