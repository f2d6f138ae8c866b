//! End-to-end behaviour of the public API on small job files.

use super::*;
use serde_json::json;

fn parse_with(src: &str, vars: &Variables) -> serde_json::Value {
    match parse_hcl(src, "job.nomad", vars) {
        Ok(v) => v,
        Err(e) => panic!("parse failed: {e}"),
    }
}

fn parse(src: &str) -> serde_json::Value {
    parse_with(src, &Variables::default())
}

fn parse_err(src: &str) -> JobspecError {
    match parse_hcl(src, "job.nomad", &Variables::default()) {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e,
    }
}

fn task(job: &serde_json::Value) -> &serde_json::Value {
    &job["TaskGroups"][0]["Tasks"][0]
}

#[test]
fn job_label_becomes_id_and_name_and_unset_fields_are_null() {
    let job = parse(r#"job "web" { datacenters = ["dc1"] }"#);
    assert_eq!(job["ID"], json!("web"));
    assert_eq!(job["Name"], json!("web"));
    assert_eq!(job["Datacenters"], json!(["dc1"]));
    assert_eq!(job["Region"], json!(null));
    assert_eq!(job["Dispatched"], json!(false));
    assert!(
        job.get("NodePool").is_none(),
        "fields newer than Nomad 1.1.2 print only when set"
    );
}

#[test]
fn job_level_attributes_decode() {
    let job = parse(
        r#"job "web" {
  name        = "Web"
  region      = "eu"
  namespace   = "prod"
  type        = "batch"
  priority    = 70
  all_at_once = true
  meta { owner = "me" }
}"#,
    );
    assert_eq!(job["Name"], json!("Web"));
    assert_eq!(job["ID"], json!("web"));
    assert_eq!(job["Region"], json!("eu"));
    assert_eq!(job["Namespace"], json!("prod"));
    assert_eq!(job["Type"], json!("batch"));
    assert_eq!(job["Priority"], json!(70));
    assert_eq!(job["AllAtOnce"], json!(true));
    assert_eq!(job["Meta"], json!({"owner": "me"}));
}

#[test]
fn group_and_task_foundation_blocks_decode() {
    let job = parse(
        r#"job "j" {
  group "g" {
    count = 3
    restart {
      attempts = 2
      interval = "30m"
      delay    = "15s"
      mode     = "fail"
    }
    ephemeral_disk { size = 500 }
    reschedule { unlimited = true }
    network {
      port "http" { static = 8080 }
      port "db" { to = 6379 }
    }
    task "t" {
      driver         = "docker"
      user           = "nobody"
      leader         = true
      kind           = "connect-proxy:x"
      kill_timeout   = "10s"
      kill_signal    = "SIGINT"
      shutdown_delay = "5s"
      env { FOO = "bar" }
      logs {
        max_files     = 3
        max_file_size = 5
      }
      resources {
        cpu        = 500
        memory     = 256
        memory_max = 512
        cores      = 2
        disk       = 100
      }
    }
  }
}"#,
    );
    let g = &job["TaskGroups"][0];
    assert_eq!(g["Name"], json!("g"));
    assert_eq!(g["Count"], json!(3));
    assert_eq!(
        g["RestartPolicy"],
        json!({"Attempts": 2, "Interval": 1_800_000_000_000i64, "Delay": 15_000_000_000i64, "Mode": "fail"})
    );
    assert_eq!(
        g["EphemeralDisk"],
        json!({"Sticky": null, "Migrate": null, "SizeMB": 500})
    );
    assert_eq!(g["ReschedulePolicy"]["Unlimited"], json!(true));
    let net = &g["Networks"][0];
    assert_eq!(
        net["ReservedPorts"],
        json!([{"Label": "http", "Value": 8080, "To": 0, "HostNetwork": ""}])
    );
    assert_eq!(
        net["DynamicPorts"],
        json!([{"Label": "db", "Value": 0, "To": 6379, "HostNetwork": ""}])
    );
    let t = task(&job);
    assert_eq!(t["Driver"], json!("docker"));
    assert_eq!(t["User"], json!("nobody"));
    assert_eq!(t["Leader"], json!(true));
    assert_eq!(t["KillTimeout"], json!(10_000_000_000i64));
    assert_eq!(t["ShutdownDelay"], json!(5_000_000_000i64));
    assert_eq!(t["KillSignal"], json!("SIGINT"));
    assert_eq!(t["Env"], json!({"FOO": "bar"}));
    assert_eq!(t["LogConfig"], json!({"MaxFiles": 3, "MaxFileSizeMB": 5}));
    assert_eq!(
        t["Resources"],
        json!({"CPU": 500, "Cores": 2, "MemoryMB": 256, "MemoryMaxMB": 512, "DiskMB": 100,
               "Networks": null, "Devices": null, "IOPS": null})
    );
}

#[test]
fn constraints_are_one_or_many_with_shorthands() {
    let job = parse(
        r#"job "j" {
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  group "g" {
    constraint { distinct_hosts = true }
    constraint {
      attribute = "${meta.rack}"
      regexp    = "r[0-9]"
    }
    constraint { distinct_property = "${node.unique.id}" }
  }
}"#,
    );
    assert_eq!(
        job["Constraints"],
        json!([{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}])
    );
    assert_eq!(
        job["TaskGroups"][0]["Constraints"],
        json!([
            {"LTarget": "", "RTarget": "", "Operand": "distinct_hosts"},
            {"LTarget": "${meta.rack}", "RTarget": "r[0-9]", "Operand": "regexp"},
            {"LTarget": "${node.unique.id}", "RTarget": "", "Operand": "distinct_property"}
        ])
    );
}

#[test]
fn driver_config_keeps_nested_blocks_and_maps_as_lists() {
    let job = parse(
        r#"job "j" {
  group "g" {
    task "t" {
      config {
        image = "redis"
        args  = ["-v", 3]
        labels = { a = "b" }
        mount {
          type   = "bind"
          target = "/x"
        }
        mount { type = "tmpfs" }
        port_map "http" { x = 1 }
      }
    }
  }
}"#,
    );
    assert_eq!(
        task(&job)["Config"],
        json!({
            "image": "redis",
            "args": ["-v", 3],
            "labels": [{"a": "b"}],
            "mount": [{"type": "bind", "target": "/x"}, {"type": "tmpfs"}],
            "port_map": [{"http": [{"x": 1}]}]
        })
    );
}

#[test]
fn runtime_references_stay_as_written() {
    let job = parse(
        r#"job "j" {
  group "g" {
    task "t" {
      env {
        A = "${NOMAD_ALLOC_DIR}/data"
        B = "${env["HOME"]}"
        C = "${attr.unique.platform.aws.public-ipv4}"
      }
    }
  }
}"#,
    );
    assert_eq!(
        task(&job)["Env"],
        json!({"A": "${NOMAD_ALLOC_DIR}/data", "B": "${env[\"HOME\"]}", "C": "${attr.unique.platform.aws.public-ipv4}"})
    );
}

#[test]
fn meta_and_env_accept_attribute_syntax() {
    let job = parse(
        r#"job "j" {
  meta = { "a.b" = 1 }
  group "g" {
    task "t" {
      env = { "X.Y" = true }
    }
  }
}"#,
    );
    assert_eq!(job["Meta"], json!({"a.b": "1"}));
    assert_eq!(task(&job)["Env"], json!({"X.Y": "true"}));
}

const WITH_VARS: &str = r#"
variable "dc" {
  type    = list(string)
  default = ["dc1"]
}
variable "count" { default = 1 }
variable "region" {}
locals {
  full = "${var.region}-${local.suffix}"
  suffix = "x"
}
job "j" {
  datacenters = var.dc
  region      = local.full
  group "g" {
    count = var.count
  }
}
"#;

#[test]
fn variables_take_defaults_then_var_files_then_cli_values() {
    let mut vars = Variables::default();
    vars.values.insert("region".into(), "eu".into());
    let job = parse_with(WITH_VARS, &vars);
    assert_eq!(job["Datacenters"], json!(["dc1"]));
    assert_eq!(job["Region"], json!("eu-x"));
    assert_eq!(job["TaskGroups"][0]["Count"], json!(1));

    let dir = std::env::temp_dir().join(format!("drover-jobspec-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("vars.hcl");
    std::fs::write(&file, "dc = [\"a\", \"b\"]\ncount = 4\nregion = \"us\"\n")
        .expect("write var file");
    vars.files.push(file);
    vars.values.insert("dc".into(), "[\"c\"]".into());
    let job = parse_with(WITH_VARS, &vars);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        job["Datacenters"],
        json!(["c"]),
        "--var wins over --var-file"
    );
    assert_eq!(job["TaskGroups"][0]["Count"], json!(4));
    assert_eq!(job["Region"], json!("eu-x"));
}

#[test]
fn unset_and_undeclared_variables_are_errors() {
    let err = parse_err(WITH_VARS);
    assert!(
        err.to_string().contains("Unset variable \"region\""),
        "{err}"
    );
    assert_eq!(err.line(), Some(7));

    let mut vars = Variables::default();
    vars.values.insert("region".into(), "eu".into());
    vars.values.insert("nope".into(), "x".into());
    let err = parse_hcl(WITH_VARS, "job.nomad", &vars).expect_err("undeclared --var");
    assert!(err.to_string().contains("Undefined -var variable"), "{err}");
}

#[test]
fn environment_variables_set_inputs_when_enabled() {
    // The variable name is unique to this test so parallel tests cannot collide.
    let src = r#"
variable "drover_jobspec_env_probe" { default = "unset" }
job "j" { region = var.drover_jobspec_env_probe }
"#;
    // SAFETY: set_var is unsafe in edition 2024 because other threads may read
    // the environment concurrently; only this test uses this variable name.
    unsafe { std::env::set_var("NOMAD_VAR_drover_jobspec_env_probe", "from-env") };
    let off = parse(src);
    let on = parse_with(
        src,
        &Variables {
            env: true,
            ..Variables::default()
        },
    );
    assert_eq!(off["Region"], json!("unset"));
    assert_eq!(on["Region"], json!("from-env"));
}

#[test]
fn dynamic_blocks_expand_with_their_iterator() {
    let job = parse(
        r#"job "j" {
  dynamic "group" {
    for_each = [{ name = "a", n = 1 }, { name = "b", n = 2 }]
    labels   = [group.value.name]
    content {
      count = group.value.n
      task "t" {
        env { ID = format("id:%s", group.value.n) }
      }
    }
  }
}"#,
    );
    assert_eq!(job["TaskGroups"][0]["Name"], json!("a"));
    assert_eq!(job["TaskGroups"][1]["Count"], json!(2));
    assert_eq!(
        job["TaskGroups"][1]["Tasks"][0]["Env"],
        json!({"ID": "id:2"})
    );
}

#[test]
fn job_level_tasks_become_their_own_groups() {
    let job = parse(
        r#"job "j" {
  vault { policies = ["p"] }
  task "solo" { driver = "exec" }
  group "g" {
    task "t" {}
  }
}"#,
    );
    assert_eq!(job["TaskGroups"][0]["Name"], json!("solo"));
    assert_eq!(job["TaskGroups"][1]["Name"], json!("g"));
    let vault = json!({"Policies": ["p"], "Namespace": null, "Env": true, "ChangeMode": "restart", "ChangeSignal": null});
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Vault"], vault);
    assert_eq!(job["TaskGroups"][1]["Tasks"][0]["Vault"], vault);
}

#[test]
fn templates_and_periodic_get_nomads_defaults() {
    let job = parse(
        r#"job "j" {
  periodic { cron = "*/5 * * * *" }
  group "g" {
    task "t" {
      template {
        data        = "x"
        destination = "local/x"
      }
    }
  }
}"#,
    );
    assert_eq!(job["Periodic"]["SpecType"], json!("cron"));
    let tmpl = &task(&job)["Templates"][0];
    assert_eq!(tmpl["ChangeMode"], json!("restart"));
    assert_eq!(tmpl["Perms"], json!("0644"));
    assert_eq!(tmpl["Splay"], json!(5_000_000_000i64));
}

#[test]
fn task_scaling_blocks_become_vertical_policies() {
    let job = parse(
        r#"job "j" {
  group "g" {
    scaling { max = 5 }
    task "t" {
      scaling "cpu" {
        max = 20
        policy { a = 1 }
      }
    }
  }
}"#,
    );
    assert_eq!(job["TaskGroups"][0]["Scaling"]["Type"], json!("horizontal"));
    let p = &task(&job)["ScalingPolicies"][0];
    assert_eq!(p["Type"], json!("vertical_cpu"));
    assert_eq!(p["Policy"], json!({"a": 1}));
    let err = parse_err(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      scaling \"disk\" { max = 1 }\n    }\n  }\n}\n",
    );
    assert!(
        err.to_string().contains("scaling policy name must be"),
        "{err}"
    );
}

#[test]
fn unknown_argument_errors_point_at_the_argument() {
    let err = parse_err(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      cunt = 1\n    }\n  }\n}\n",
    );
    assert_eq!(
        err.to_string(),
        "job.nomad:4:7: Unsupported argument; An argument named \"cunt\" is not expected here."
    );
    assert_eq!(
        (err.file(), err.line(), err.column()),
        ("job.nomad".to_string(), Some(4), Some(7))
    );
}

#[test]
fn invalid_durations_name_the_attribute() {
    let err = parse_err(
        "job \"j\" {\n  group \"g\" {\n    task \"t\" {\n      kill_timeout = \"10q\"\n    }\n  }\n}\n",
    );
    assert_eq!(
        err.to_string(),
        "job.nomad:4:22: invalid duration \"10q\" for kill_timeout"
    );
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let err = parse_err("job \"j\" {\n  group \"g\" {\n    count = \n  }\n}\n");
    assert!(matches!(err, JobspecError::Syntax { .. }), "{err:?}");
    assert_eq!(err.line(), Some(3));
    assert!(err.to_string().starts_with("job.nomad:3:"), "{err}");
}

#[test]
fn structural_mistakes_are_rejected() {
    for (src, needle) in [
        ("", "Missing job block"),
        ("job \"a\" {}\njob \"b\" {}\n", "Duplicate job block"),
        (
            "job \"a\" {\n  grup \"g\" {}\n}\n",
            "Unsupported block type",
        ),
        ("job \"a\" {\n  group {}\n}\n", "Missing name for group"),
        (
            "job \"a\" {\n  group \"g\" {\n    task \"t\" {\n      resources {}\n      resources {}\n    }\n  }\n}\n",
            "Duplicate resources block",
        ),
        (
            "job \"a\" {\n  group \"g\" { count = \"many\" }\n}\n",
            "Unsuitable value",
        ),
        ("job \"a\" { region = var.nope }\n", "Unsupported attribute"),
        (
            "job \"a\" {\n  group \"g\" {\n    network {\n      port \"a\" {}\n      port \"A\" {}\n    }\n  }\n}\n",
            "port label collision",
        ),
        (
            "job \"a\" {\n  group \"g\" {\n    network {\n      port \"\" {}\n    }\n  }\n}\n",
            "Invalid port label",
        ),
        (
            "job \"a\" {\n  group \"g\" {\n    network {}\n    network {}\n  }\n}\n",
            "Too many network blocks",
        ),
    ] {
        let err = parse_err(src);
        assert!(err.to_string().contains(needle), "{src}: {err}");
    }
}

#[test]
fn json_jobs_are_accepted_wrapped_or_bare() {
    let wrapped = parse_json(r#"{"Job": {"ID": "x", "Name": "x"}}"#, "j.json").expect("wrapped");
    let bare = parse_json(r#"{"ID": "x", "Name": "x"}"#, "j.json").expect("bare");
    assert_eq!(wrapped, bare);
    assert!(parse_json("[1]", "j.json").is_err());
    let err = parse_json("{\n  \"Job\": ", "j.json").expect_err("truncated");
    assert_eq!(err.line(), Some(2));
}

#[test]
fn parse_file_picks_the_format_from_extension_or_content() {
    let dir = std::env::temp_dir().join(format!("drover-jobspec-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let hcl = dir.join("a.nomad");
    let json_named = dir.join("b.json");
    let json_content = dir.join("c.nomad");
    std::fs::write(&hcl, r#"job "a" {}"#).expect("write");
    std::fs::write(&json_named, r#"{"Job": {"ID": "b"}}"#).expect("write");
    std::fs::write(&json_content, r#"  {"ID": "c"}"#).expect("write");
    let vars = Variables::default();
    let a = parse_file(&hcl, &vars).expect("hcl");
    let b = parse_file(&json_named, &vars).expect("json by extension");
    let c = parse_file(&json_content, &vars).expect("json by content");
    let missing = parse_file(&dir.join("missing.nomad"), &vars);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        (a["ID"].clone(), b["ID"].clone(), c["ID"].clone()),
        (json!("a"), json!("b"), json!("c"))
    );
    assert!(matches!(missing, Err(JobspecError::Io { .. })));
}

#[test]
fn variable_validation_rejects_bad_values() {
    let src = r#"
variable "count" {
  type    = number
  default = 3
  validation {
    condition     = var.count < 10
    error_message = "Count must be below ten."
  }
}
job "j" {
  group "g" { count = var.count }
}
"#;
    assert_eq!(parse(src)["TaskGroups"][0]["Count"], json!(3));
    let mut vars = Variables::default();
    vars.values.insert("count".into(), "12".into());
    let err = parse_hcl(src, "job.nomad", &vars).expect_err("validation");
    assert!(
        err.to_string().contains("Count must be below ten."),
        "{err}"
    );
}

#[test]
fn file_function_reads_relative_to_the_job_file() {
    let dir = std::env::temp_dir().join(format!("drover-jobspec-fn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("motd.txt"), "hello").expect("write");
    let job_path = dir.join("job.nomad");
    std::fs::write(
        &job_path,
        "job \"j\" {\n  meta { motd = file(\"motd.txt\") }\n}\n",
    )
    .expect("write");
    let job = parse_file(&job_path, &Variables::default());
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(job.expect("parses")["Meta"], json!({"motd": "hello"}));
}

#[test]
fn heredocs_and_escapes_render_like_hcl() {
    let job = parse(
        "job \"j\" {\n  meta {\n    a = <<-EOT\n      line ${NOMAD_TASK_DIR}\n        indented\n    EOT\n    b = \"$${literal} %%{x}\"\n  }\n}\n",
    );
    assert_eq!(
        job["Meta"],
        json!({"a": "line ${NOMAD_TASK_DIR}\n  indented\n", "b": "${literal} %{x}"})
    );
}

#[test]
fn disconnect_block_and_the_older_disconnect_fields_decode() {
    let job = parse(
        r#"job "j" {
  group "g" {
    max_client_disconnect        = "1h"
    stop_after_client_disconnect = "90s"
    prevent_reschedule_on_lost   = true
    disconnect {
      lost_after           = "6h"
      stop_on_client_after = "2m"
      replace              = false
      reconcile            = "keep_original"
    }
    task "t" {
      driver = "raw_exec"
    }
  }
}"#,
    );
    let g = &job["TaskGroups"][0];
    assert_eq!(g["MaxClientDisconnect"], json!(3_600_000_000_000_i64));
    assert_eq!(g["StopAfterClientDisconnect"], json!(90_000_000_000_i64));
    assert_eq!(g["PreventRescheduleOnLost"], json!(true));
    assert_eq!(
        g["Disconnect"],
        json!({"LostAfter": 21_600_000_000_000_i64, "StopOnClientAfter": 120_000_000_000_i64,
            "Replace": false, "Reconcile": "keep_original"})
    );
    let err = parse_err(
        "job \"j\" {\n  group \"g\" {\n    disconnect {\n      lost_afer = \"1h\"\n    }\n  }\n}\n",
    );
    assert_eq!(
        (err.file(), err.line(), err.column()),
        ("job.nomad".to_string(), Some(4), Some(7)),
        "{err}"
    );
}
