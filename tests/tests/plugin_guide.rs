//! docs/writing-a-driver-plugin.md stays true to the code it shows.

use drover_tests::workspace_root;

fn read(path: &str) -> String {
    std::fs::read_to_string(workspace_root().join(path))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

#[test]
fn the_guides_minimal_driver_is_the_example_crates_source() {
    let guide = read("docs/writing-a-driver-plugin.md");
    let source = read("examples/minimal-driver/src/lib.rs");
    let section = guide
        .split("## A complete minimal driver")
        .nth(1)
        .expect("the guide's minimal driver section");
    let block = section
        .split("```rust\n")
        .nth(1)
        .and_then(|b| b.split("```\n").next())
        .expect("the section's code block");
    assert_eq!(
        block, source,
        "the guide's minimal driver differs from examples/minimal-driver/src/lib.rs: copy the file into the guide"
    );
}
