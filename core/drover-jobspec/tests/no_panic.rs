//! The parser must return errors, never panic, on truncated or garbled input.

use std::path::Path;

use drover_jobspec::{Variables, parse_hcl, parse_json};

const SAMPLE: &str = r#"
variable "image" {
  type    = string
  default = "redis:7"
}

locals {
  ports = ["db", "http"]
  tag   = "${var.image}-x"
}

job "example" {
  datacenters = ["dc1"]
  type        = "service"

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  group "cache" {
    count = 2

    network {
      port "db" { to = 6379 }
      port "http" { static = 8080 }
    }

    dynamic "service" {
      for_each = local.ports
      content {
        name = service.value
        port = service.value
        check {
          type     = "tcp"
          interval = "10s"
          timeout  = "2s"
        }
      }
    }

    task "redis" {
      driver = "docker"
      config {
        image = var.image
        ports = [for p in local.ports : upper(p)]
        mount {
          type   = "bind"
          source = "${NOMAD_ALLOC_DIR}/data"
        }
      }
      env = { "A.B" = "1", C = 2 }
      template {
        data        = <<-EOT
          addr = {{ env "NOMAD_ADDR_db" }}
          %{ if true }yes%{ endif }
        EOT
        destination = "local/app.conf"
      }
      resources {
        cpu    = 500
        memory = 256
      }
      kill_timeout = "10s"
    }
  }
}
"#;

const JSON_SAMPLE: &str =
    r#"{"Job": {"ID": "x", "Name": "x", "TaskGroups": [{"Name": "g", "Tasks": []}]}}"#;

/// Feeds `src` and every prefix of it (at char boundaries, with a stride) to the parser.
fn all_prefixes(src: &str, stride: usize) {
    let vars = Variables::default();
    let mut count = 0usize;
    for (i, _) in src.char_indices() {
        count += 1;
        if !count.is_multiple_of(stride) {
            continue;
        }
        let prefix = &src[..i];
        let _ = parse_hcl(prefix, "prefix.nomad", &vars);
        let _ = parse_json(prefix, "prefix.json");
    }
    let _ = parse_hcl(src, "full.nomad", &vars);
}

/// Deterministic byte-level corruption: replaces characters with syntax
/// characters at pseudo-random positions.
fn garbled(src: &str, seed: u64, edits: usize) -> String {
    const NOISE: &[char] = &[
        '{', '}', '"', '$', '%', '[', ']', '=', '\n', '\\', '<', '(', ')', '.', '*', '~', '#', 'é',
    ];
    let mut chars: Vec<char> = src.chars().collect();
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    for _ in 0..edits {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if chars.is_empty() {
            break;
        }
        let pos = (state >> 33) as usize % chars.len();
        let noise = NOISE[(state >> 20) as usize % NOISE.len()];
        match (state >> 10) % 3 {
            0 => chars[pos] = noise,
            1 => chars.insert(pos, noise),
            _ => {
                chars.remove(pos);
            }
        }
    }
    chars.into_iter().collect()
}

#[test]
fn every_prefix_of_a_job_is_handled_without_panic() {
    all_prefixes(SAMPLE, 1);
    all_prefixes(JSON_SAMPLE, 1);
}

#[test]
fn garbled_jobs_are_handled_without_panic() {
    let vars = Variables::default();
    for seed in 0..400 {
        let text = garbled(SAMPLE, seed, 1 + (seed as usize % 6));
        let _ = parse_hcl(&text, "garbled.nomad", &vars);
        let _ = parse_json(&garbled(JSON_SAMPLE, seed, 2), "garbled.json");
    }
    for junk in [
        "",
        "{",
        "}",
        "job",
        "job \"",
        "job \"x\" {",
        "${",
        "%{",
        "<<EOF",
        "\u{0}",
        "job \"x\" { a = [1,",
        "job x {}",
    ] {
        let _ = parse_hcl(junk, "junk.nomad", &vars);
        let _ = parse_json(junk, "junk.json");
    }
}

#[test]
fn deeply_nested_input_is_rejected_without_overflowing_the_stack() {
    let vars = Variables::default();
    for depth in [10, 60, 100, 1_000, 100_000] {
        for (open, close) in [
            ("[", "]"),
            ("{a=", "}"),
            ("(", ")"),
            ("\"${", "}\""),
            ("-", ""),
            ("!", ""),
            ("[for x in ", " : x]"),
        ] {
            let expr = format!("{}[1]{}", open.repeat(depth), close.repeat(depth));
            let src = format!(
                "job \"x\" {{\n group \"g\" {{\n task \"t\" {{\n config {{\n a = {expr}\n }}\n }}\n }}\n }}"
            );
            let _ = parse_hcl(&src, "deep.nomad", &vars);
        }
        let blocks = format!(
            "job \"x\" {{\n group \"g\" {{\n task \"t\" {{\n config {{\n {}\n }}\n }}\n }}\n }}",
            "x {\n".repeat(depth) + &"}\n".repeat(depth)
        );
        let _ = parse_hcl(&blocks, "deep.nomad", &vars);
        let _ = parse_json(&"[".repeat(depth), "deep.json");
    }
}

#[test]
fn resource_hungry_functions_are_bounded() {
    let vars = Variables::default();
    for expr in [
        "format(\"%99999999999d\", 1)",
        "indent(99999999999, \"a\nb\")",
        "range(0, 99999999)",
        "pow(10, 400)",
        "substr(\"abc\", -9, -9)",
    ] {
        let src = format!("job \"x\" {{\n meta = {{ a = {expr} }}\n}}");
        let _ = parse_hcl(&src, "fn.nomad", &vars);
    }
}

/// `file()` reads regular files only: devices and FIFOs would fill memory or block.
#[test]
fn file_functions_refuse_devices() {
    let vars = Variables::default();
    for path in ["/dev/zero", "/dev/stdin", "/proc/self"] {
        for f in ["file", "filebase64"] {
            let src = format!("job \"x\" {{\n meta = {{ a = {f}(\"{path}\") }}\n}}");
            let e = parse_hcl(&src, "f.nomad", &vars).unwrap_err().to_string();
            assert!(e.contains("failed to read"), "{f}({path}): {e}");
        }
    }
}

/// Jobs whose evaluation would multiply data without bound must fail fast.
#[test]
fn exponential_jobs_are_refused_quickly() {
    let vars = Variables::default();
    let started = std::time::Instant::now();
    let template = "job \"x\" {\n meta = { a = \"%{ for a in range(1000) }%{ for b in range(1000) }%{ for c in range(1000) }xxxxxxxxxxxxxxxx%{ endfor }%{ endfor }%{ endfor }\" }\n}\n";
    assert!(parse_hcl(template, "t.nomad", &vars).is_err());
    let lists = "job \"x\" {\n meta = { a = length([for a in range(1000) : [for b in range(1000) : [for c in range(1000) : c]]]) }\n}\n";
    assert!(parse_hcl(lists, "l.nomad", &vars).is_err());
    let mut locals = String::from("locals {\n  l0 = \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"\n");
    for i in 1..64 {
        locals.push_str(&format!(
            "  l{i} = [local.l{p}, local.l{p}, \"${{local.l{p}}}\"]\n",
            p = i - 1
        ));
    }
    locals.push_str("}\njob \"x\" {}\n");
    assert!(parse_hcl(&locals, "locals.nomad", &vars).is_err());
    let dynamic = "job \"x\" {\n  dynamic \"group\" {\n    for_each = range(1000)\n    labels = [\"g${group.key}\"]\n    content {\n      dynamic \"task\" {\n        for_each = range(1000)\n        labels = [\"t${task.key}\"]\n        content {\n          dynamic \"service\" {\n            for_each = range(1000)\n            content {}\n          }\n        }\n      }\n    }\n  }\n}\n";
    assert!(parse_hcl(dynamic, "d.nomad", &vars).is_err());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn prefixes_of_corpus_files_are_handled_without_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/jobspecs");
    let Ok(manifest) = std::fs::read_to_string(dir.join("MANIFEST.tsv")) else {
        println!("skipping: shared job corpus not found");
        return;
    };
    for (n, line) in manifest.lines().skip(1).enumerate() {
        let Some(path) = line.split('\t').next() else {
            continue;
        };
        let Ok(src) = std::fs::read_to_string(dir.join(path)) else {
            continue;
        };
        // Full coverage on a few files, sampled prefixes on the rest to bound run time.
        all_prefixes(&src, if n % 10 == 0 { 1 } else { 23 });
    }
}
