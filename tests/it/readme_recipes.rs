//! Runs every command of the README's "Recipes" section as written, so that
//! the recipes stay true when the README or the tool changes. The commands
//! are read from the README itself: inline `safetensors-convert ...` code in a bullet,
//! and the lines of `sh` blocks. `producer` and `consumer` stand for any
//! programs; the files the recipes name are made from the fixtures.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shell commands of the README's Recipes section.
fn recipes(readme: &str) -> Vec<String> {
    let start = readme.find("\n## Recipes").expect("a Recipes section");
    let section = &readme[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |e| e + 1)];
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in section.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = t == "```sh";
            continue;
        }
        if in_sh {
            if !t.is_empty() {
                out.push(t.to_string());
            }
        } else if t.starts_with("- **") {
            // Inline code after the bold title: `safetensors-convert ...`.
            if let Some(code) = t
                .split('`')
                .nth(1)
                .filter(|c| c.starts_with("safetensors-convert "))
            {
                out.push(code.to_string());
            }
        }
    }
    out
}

/// The outputs a command names with `-o`, other than standard output.
fn outputs(cmd: &str) -> Vec<String> {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "-o" && w[1] != "-")
        .map(|w| w[1].to_string())
        .collect()
}

/// The files the recipes start from, in `dir`.
fn stage_inputs(dir: &Path) {
    let fixture = |n: &str| root().join("fixtures/example").join(n);
    std::fs::copy(fixture("model.npz"), dir.join("weights.npz")).unwrap();
    std::fs::copy(
        fixture("model-input.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    // A sharded checkpoint beside it: model.safetensors.index.json and its shards.
    let sharded = dir.join("sharded");
    std::fs::create_dir(&sharded).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_safetensors-convert"))
        .arg(fixture("model-input.safetensors"))
        .args(["--max-shard-size", "100B", "-o"])
        .arg(sharded.join("model.safetensors"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for entry in std::fs::read_dir(&sharded).unwrap() {
        let entry = entry.unwrap();
        std::fs::rename(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    // A downloaded checkpoint folder: one model file and its config.
    let folder = dir.join("my-model");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(
        fixture("model-input.safetensors"),
        folder.join("model.safetensors"),
    )
    .unwrap();
    std::fs::write(folder.join("config.json"), "{}").unwrap();
}

#[test]
fn every_readme_recipe_runs_as_written() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let cmds = recipes(&readme);
    assert!(
        cmds.len() >= 5,
        "the Recipes section's commands were not found: {cmds:?}"
    );
    for cmd in &cmds {
        eprintln!("recipe: {cmd}");
        let dir = tempfile::tempdir().unwrap();
        stage_inputs(dir.path());
        let script = format!(
            "safetensors-convert() {{ \"$CONVERT\" \"$@\"; }}\n\
             producer() {{ cat weights.npz; }}\n\
             consumer() {{ cat > consumed.safetensors; }}\n\
             {cmd}\n"
        );
        let o = Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .env("CONVERT", env!("CARGO_BIN_EXE_safetensors-convert"))
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "recipe failed: {cmd}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        for out in outputs(cmd) {
            let path = dir.path().join(&out);
            let index = dir
                .path()
                .join(out.replace(".safetensors", ".safetensors.index.json"));
            assert!(
                path.is_file() || index.is_file(),
                "{cmd}: wrote neither {out} nor its index"
            );
        }
        if cmd.contains("| consumer") {
            let got = std::fs::read(dir.path().join("consumed.safetensors")).unwrap();
            assert!(got.len() > 8, "{cmd}: the consumer got {} bytes", got.len());
        }
        if cmd.contains("2>report.json") {
            let report = std::fs::read_to_string(dir.path().join("report.json")).unwrap();
            let v: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
            assert_eq!(v["ok"], true, "{cmd}: {report}");
        }
    }
}

/// Issue 42.1: the README's `cargo install` installs no `convert` (ImageMagick's
/// name, shadowed for every shell since ~/.cargo/bin comes first on PATH),
/// the README's two set-up commands work as written with the name it does
/// install, and no example in the README calls the tool by another name.
#[test]
fn the_install_gives_a_name_of_its_own_and_the_readme_uses_it() {
    // The `name = ` line after each `[[bin]]` of Cargo.toml.
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let bins: Vec<&str> = manifest
        .split("[[bin]]")
        .skip(1)
        .map(|b| {
            let line = b.lines().find(|l| l.starts_with("name = ")).unwrap();
            line.trim_start_matches("name = ").trim_matches('"')
        })
        .collect();
    // `convert` is the tool's name in the repository; the install names its twin.
    assert_eq!(bins, ["convert", "safetensors-convert"]);
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let install = &readme[readme.find("## Install").unwrap()..];
    let block = &install[install.find("```sh\n").unwrap() + 6..];
    let commands: Vec<&str> = block[..block.find("```").unwrap()]
        .lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .collect();
    assert_eq!(
        commands[0],
        "cargo install --path . --bin safetensors-convert"
    );
    let first = commands[1];
    assert!(first.starts_with("safetensors-convert "), "{first}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model.safetensors");
    let script = format!(
        "safetensors-convert() {{ \"$CONVERT\" \"$@\"; }}\n{}\n",
        first.replace("/tmp/model.safetensors", out.to_str().unwrap())
    );
    let o = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("CONVERT", env!("CARGO_BIN_EXE_safetensors-convert"))
        .current_dir(root())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(root().join("fixtures/example/model.safetensors")).unwrap()
    );
    // No example line calls `convert ...`: each uses the installed name.
    let mut in_block = false;
    for line in readme.lines() {
        let t = line.trim_start();
        if t.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        let calls_convert = match in_block {
            true => {
                t.starts_with("convert ") || t.contains("| convert ") || t.contains("do convert ")
            }
            false => t.contains("`convert "),
        };
        assert!(!calls_convert, "{line}");
    }
}

#[test]
fn recipes_are_read_from_bullets_and_sh_blocks_only() {
    let md = "# T\n\n## Recipes\n\n- **A:** `safetensors-convert a -o b`\n- **B:** text\n\n  ```sh\n  x | convert - -o -\n  ```\n\n  ```rust\n  let x = 1;\n  ```\n\n## Next\n- **C:** `safetensors-convert c -o d`\n";
    assert_eq!(
        recipes(md),
        ["safetensors-convert a -o b", "x | convert - -o -"]
    );
    assert_eq!(
        outputs("convert a -o out/b.safetensors -o -"),
        ["out/b.safetensors"]
    );
}

/// The README's Rust snippets, as a reader copies them: every ```rust block.
fn rust_blocks(md: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in md.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```rust") => current = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn every_readme_rust_snippet_compiles_as_pasted() {
    // The doctests (src/lib.rs includes the README) compile and run each
    // block; this checks that what they compile is what a reader sees: no
    // hidden `# ` lines, a whole program, and no crate but this one and std.
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks = rust_blocks(&readme);
    assert!(blocks.len() >= 2, "the README's Rust snippets: {blocks:?}");
    for block in &blocks {
        for line in block.lines() {
            let t = line.trim_start();
            assert!(
                !(t == "#" || t.starts_with("# ")),
                "a hidden doctest line: {line:?}\n{block}"
            );
        }
        assert!(block.contains("fn main()"), "not a whole program:\n{block}");
        for word in block.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
            if let Some((krate, _)) = word.split_once("::") {
                let known = ["safetensors_stream", "std", "Self", "Box", "String", "Vec"];
                let local = krate.chars().next().is_some_and(char::is_uppercase);
                assert!(
                    known.contains(&krate) || local,
                    "a crate the reader does not have: {word}\n{block}"
                );
            }
        }
    }
}

#[test]
fn rust_blocks_are_found_and_hidden_lines_would_show() {
    let md = "x\n```rust\nfn main() {}\n```\n```sh\nls\n```\n  ```rust\n  # use a;\n  ```\n";
    assert_eq!(rust_blocks(md), ["fn main() {}\n", "  # use a;\n"]);
}
