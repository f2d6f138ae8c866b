//! Feeds arbitrary bytes (as lossy UTF-8) to both job parsers. Any panic, hang or runaway
//! allocation is a bug: a job file must never take the parser down.
#![no_main]

use drover_jobspec::{Variables, parse_hcl, parse_json};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    let _ = parse_hcl(&src, "fuzz.nomad", &Variables::default());
    let _ = parse_json(&src, "fuzz.json");
});
