//! The default command: convert inputs to an output, with signals handled.

use std::process::ExitCode;

use safetensors_stream::convert::{convert as run_convert, ConvertOptions, Output, Report};
use safetensors_stream::header::Order;
use safetensors_stream::plan::PlanOptions;
use safetensors_stream::sink::SinkOptions;
use safetensors_stream::source::SourceOptions;
use safetensors_stream::units::HumanBytes;
use safetensors_stream::{Error, ErrorKind};
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::{ByteOrder, ConvertArgs, OrderArg};
use safetensors_stream::source::raw::{RawSpec, RawTensor};

fn raw_spec(args: &ConvertArgs) -> Result<Option<RawSpec>, Error> {
    let mut spec = if let Some(manifest) = &args.raw_manifest {
        let text =
            std::fs::read(manifest).map_err(|e| Error::io(e).with_input(manifest.display()))?;
        RawSpec::from_manifest(&text).map_err(|e| e.with_input(manifest.display()))?
    } else if let (Some(dtype), Some(shape)) = (args.raw_dtype, &args.raw_shape) {
        RawSpec {
            tensors: vec![RawTensor {
                name: args.name.clone().unwrap_or_default(),
                dtype,
                shape: RawSpec::parse_shape(shape)?,
                offset: args.raw_offset,
            }],
            big_endian: false,
            allow_trailing: false,
        }
    } else {
        return Ok(None);
    };
    spec.big_endian = args.raw_byte_order == ByteOrder::Big;
    spec.allow_trailing = args.raw_allow_trailing;
    Ok(Some(spec))
}

fn options(args: &ConvertArgs) -> Result<ConvertOptions, Error> {
    let quiet = args.quiet;
    Ok(ConvertOptions {
        source: SourceOptions {
            skip_non_npy: args.skip_non_npy,
            name: args.name.clone(),
            raw: raw_spec(args)?,
        },
        notice: Some(Arc::new(move |msg: &str| {
            if !quiet {
                eprintln!("convert: {msg}");
            }
        })),
        plan: PlanOptions {
            include: args.include.clone(),
            exclude: args.exclude.clone(),
            renames: args.rename.clone(),
            prefix: args.prefix.clone(),
            metadata: args.metadata.clone(),
            order: match args.order {
                OrderArg::Canonical => Order::Canonical,
                OrderArg::Input => Order::AsGiven,
            },
            max_shard_size: args.max_shard_size,
            casts: args.cast.clone(),
            cast_all: args.cast_all,
        },
        sink: SinkOptions {
            buffer_size: usize::try_from(args.buffer_size).unwrap_or(usize::MAX),
        },
        sync: !args.no_sync,
    })
}

/// Runs the conversion; on SIGINT or SIGTERM the conversion is dropped,
/// which deletes its temp files, and the exit code is 128 + the signal.
pub(crate) fn convert(args: &ConvertArgs) -> Result<ExitCode, Error> {
    let output = match args.output.as_deref() {
        Some(p) if p.as_os_str() == "-" => Output::Stdout,
        Some(p) => Output::File(p.to_path_buf()),
        None => unreachable!("clap requires --output"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let opts = options(args)?;
    let report = rt.block_on(async {
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            r = run_convert(&args.inputs, &output, &opts) => r.map_err(Interrupt::No),
            _ = int.recv() => Err(Interrupt::Signal("SIGINT", 130)),
            _ = term.recv() => Err(Interrupt::Signal("SIGTERM", 143)),
        }
    });
    match report {
        Ok(report) => {
            if !args.quiet {
                summarize(&report);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(Interrupt::No(e)) => Err(e),
        Err(Interrupt::Signal(name, code)) => {
            crate::report(&Error::new(ErrorKind::Interrupted(name)));
            Ok(ExitCode::from(code))
        }
    }
}

enum Interrupt {
    No(Error),
    Signal(&'static str, u8),
}

impl From<std::io::Error> for Interrupt {
    fn from(e: std::io::Error) -> Self {
        Interrupt::No(Error::io(e))
    }
}

fn summarize(report: &Report) {
    for f in &report.outputs {
        if f.path != "-" {
            eprintln!(
                "wrote {} ({} bytes, {})",
                f.path,
                f.bytes,
                HumanBytes(f.bytes)
            );
        }
    }
    eprintln!(
        "{} tensors, {} of tensor data, from {} input{}",
        report.tensors,
        HumanBytes(report.data_bytes),
        report.inputs.len(),
        if report.inputs.len() == 1 { "" } else { "s" }
    );
}
