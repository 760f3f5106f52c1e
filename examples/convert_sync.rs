//! Converts a file from ordinary (non-async) code: no runtime to set up.
//!
//! ```text
//! cargo run --example convert_sync -- fixtures/example/model.npz /tmp/model.safetensors
//! ```

use std::process::ExitCode;

use safetensors_stream::{convert_blocking, ConvertOptions, Output};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: convert_sync INPUT OUTPUT");
        return ExitCode::from(2);
    };
    let output = Output::File(output.into());
    match convert_blocking(&[input.into()], &output, &ConvertOptions::default()) {
        Ok(report) => {
            println!(
                "{} tensors, {} bytes of data, in {:.3} s",
                report.tensors, report.data_bytes, report.seconds
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("convert_sync: {e}");
            ExitCode::FAILURE
        }
    }
}
