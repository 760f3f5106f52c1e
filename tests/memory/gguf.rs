//! GGUF headers that claim more than they hold are refused before
//! allocating on the claim, and within the header budget.

use crate::support::gguf::{parse, Builder};
use safetensors_stream::ErrorKind;

#[test]
fn huge_counts_fail_before_allocating() {
    let _g = crate::alloc::serial();
    for (tensors, kvs) in [(1u64 << 60, 0u64), (0, 1 << 60), (u64::MAX, u64::MAX)] {
        let mut b = Builder::new(3, tensors, kvs, false);
        b.out.resize(100, 0);
        let bytes = b.out.clone();
        let (result, peak) = crate::alloc::peak_during(|| parse(&bytes));
        let e = result.expect_err("refused");
        assert!(e.to_string().contains("cannot fit"), "{e}");
        assert!(peak < 16 * 1024, "peak {peak} bytes for a 100-byte file");
    }
    // A string and an array claiming more than the file holds.
    let mut b = Builder::new(3, 0, 1, false);
    b.u64(1 << 62);
    let (result, peak) = crate::alloc::peak_during(|| parse(&b.data(&[])));
    assert!(result.is_err() && peak < 16 * 1024, "peak {peak}");
    let mut b = Builder::new(3, 0, 1, false);
    b.str("k").u32(9).u32(8).u64(1 << 61);
    let (result, peak) = crate::alloc::peak_during(|| parse(&b.data(&[])));
    let e = result.expect_err("refused");
    assert!(
        e.to_string().contains("cannot fit") && peak < 16 * 1024,
        "{e} {peak}"
    );
}

/// Parses `bytes` expecting the header budget to refuse them, with no
/// more allocated meanwhile than the budget: 3 times the file + 64 MiB.
fn over_budget(bytes: &[u8]) {
    let (result, peak) = crate::alloc::peak_during(|| parse(bytes));
    let e = result.expect_err("over its budget");
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Header(safetensors_stream::HeaderError::HeaderBudget { .. })
        ),
        "{e}"
    );
    let budget = 3 * bytes.len() + (64 << 20);
    assert!(peak <= budget, "peak {peak} over {budget}");
}

#[test]
fn many_small_key_values_or_tensors_are_refused_within_the_budget() {
    let _g = crate::alloc::serial();
    // A key-value of 21 bytes or a tensor of 37 costs ten times that held:
    // 3 million of either in 56 MB held over 500 MB before this budget.
    let n = 1_000_000u64;
    let mut b = Builder::new(3, 0, n, false);
    for i in 0..n {
        b.str(&format!("k{i:07}")).u32(0).out.push(1);
    }
    over_budget(&b.data(&[]));
    let mut b = Builder::new(3, n, 0, false);
    for i in 0..n {
        b.tensor(&format!("t{i:07}"), &[0], 0, 0);
    }
    over_budget(&b.data(&[]));
}
