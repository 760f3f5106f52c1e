//! ONNX models and Flax MessagePack files that claim more than they hold
//! (2^60 and 2^40 elements over 4 bytes, data lengths of 2^40 bytes and
//! 4 GiB, a map of 2^32 - 1 entries) are refused without allocating on the
//! claim: the source's peak is its cursor's buffer and its listing.

use crate::support::formats::{fb, map1, model, ndarray, tensor, varint};
use safetensors_stream::source::msgpack::MsgpackSource;
use safetensors_stream::source::onnx::OnnxSource;
use safetensors_stream::Error;

/// The most a refusal may allocate: the 64 KiB cursor and small change.
const SMALL: usize = 256 * 1024;

fn onnx_peak(bytes: &[u8]) -> (Error, usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = crate::support::write(dir.path(), "m.onnx", bytes);
    let file = std::fs::File::open(&path).unwrap();
    let len = bytes.len() as u64;
    let (r, peak) =
        crate::alloc::peak_during(|| OnnxSource::open(file, len, Some(&path), "m.onnx"));
    (r.expect_err("refused"), peak)
}

fn msgpack_peak(bytes: &[u8]) -> (Error, usize) {
    let mut file = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut file, bytes).unwrap();
    let len = bytes.len() as u64;
    let (r, peak) = crate::alloc::peak_during(|| MsgpackSource::open(file, len, "f.msgpack"));
    (r.expect_err("refused"), peak)
}

#[test]
fn onnx_claims_are_refused_before_allocating() {
    let _g = crate::alloc::serial();
    let raw4 = fb(9, &[0; 4]);
    let claim = [tensor("w", 1, &[4], &[]), vec![0x4a], varint(1 << 40)].concat();
    for (bytes, name) in [
        (
            model(&[tensor("big", 1, &[1 << 30, 1 << 30], &raw4)]),
            "shape_overflow",
        ),
        (
            model(&[tensor("big", 1, &[1 << 20, 1 << 20], &raw4)]),
            "onnx",
        ),
        (model(&[claim]), "onnx"),
        (model(&[tensor("d", 1, &[1; 65], &raw4)]), "onnx"),
    ] {
        let (e, peak) = onnx_peak(&bytes);
        assert_eq!(e.kind().name(), name, "{e}");
        assert!(peak < SMALL, "peak {peak} bytes for {e}");
    }
}

#[test]
fn msgpack_claims_are_refused_before_allocating() {
    let _g = crate::alloc::serial();
    let mut bin_claim = map1("w", &ndarray(&[1], "uint8", &[7]));
    let n = bin_claim.len();
    bin_claim[n - 5..n - 1].copy_from_slice(&u32::MAX.to_be_bytes());
    let deep = (0..100).fold(vec![0xc0], |v, _| map1("a", &v));
    for (bytes, name) in [
        (
            map1("big", &ndarray(&[1 << 30, 1 << 30], "float32", &[0; 4])),
            "shape_overflow",
        ),
        (
            map1("big", &ndarray(&[1 << 20, 1 << 20], "float32", &[0; 4])),
            "msgpack",
        ),
        (bin_claim, "msgpack"),
        (
            vec![0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, b'a', 0xc0],
            "msgpack",
        ),
        (deep, "msgpack"),
    ] {
        let (e, peak) = msgpack_peak(&bytes);
        assert_eq!(e.kind().name(), name, "{e}");
        assert!(peak < SMALL, "peak {peak} bytes for {e}");
    }
}

/// An HDF5 file with each byte of its metadata set to 0xff in turn (sizes,
/// addresses and counts claiming up to 2^64): opening it allocates no more
/// than the file's own length allows, whatever it claims.
#[test]
fn hdf5_claims_are_bounded_by_the_file() {
    use safetensors_stream::source::hdf5::Hdf5Source;
    let _g = crate::alloc::serial();
    let whole = std::fs::read(crate::support::fixtures().join("hdf5/latest.h5")).unwrap();
    let mut worst = 0;
    for at in 0..whole.len().min(1200) {
        let mut bytes = whole.clone();
        bytes[at] = 0xff;
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        let len = bytes.len() as u64;
        let (_, peak) = crate::alloc::peak_during(|| Hdf5Source::open(file, len, "f.h5"));
        worst = worst.max(peak);
    }
    assert!(worst < SMALL, "peak {worst} bytes");
}
