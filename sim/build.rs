//! Embeds every `scenarios/*.txt` file of the workspace in the binary, so a
//! new scenario is one new file: no list to update, and `doze-sim --scenario
//! NAME` works from any directory.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".txt"))
                .collect()
        })
        .unwrap_or_default();
    // Sorted, so the sweep's choice of scenario by seed does not depend on
    // the order the file system lists.
    names.sort();
    let mut out = String::from("/// (file stem, text) of every scenario file, sorted by name.\n");
    out.push_str("pub const BUILTIN: &[(&str, &str)] = &[\n");
    for name in &names {
        let path = dir.join(name);
        println!("cargo:rerun-if-changed={}", path.display());
        let stem = name.trim_end_matches(".txt");
        writeln!(
            out,
            "    ({stem:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .unwrap();
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("scenarios.rs");
    std::fs::write(dest, out).unwrap();
}
