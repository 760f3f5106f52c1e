//! `safetensors-convert`: the `convert` program under the name `cargo install`
//! gives it (ImageMagick 6 owns `convert`). The same source, one target each.

#[path = "convert/main.rs"]
mod convert;

fn main() -> std::process::ExitCode {
    convert::main()
}
