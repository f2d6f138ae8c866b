//! Tests of the policy language and of ACL evaluation, after Nomad's `policy_test.go` and
//! `acl_test.go`.

use super::compiled::glob_match;
use super::*;

fn parse(rules: &str) -> Policy {
    match parse_policy(rules) {
        Ok(p) => p,
        Err(e) => panic!("{rules}\n=> {e}"),
    }
}

fn parse_err(rules: &str) -> PolicyError {
    match parse_policy(rules) {
        Ok(p) => panic!("{rules}\n=> parsed: {p:?}"),
        Err(e) => e,
    }
}

fn acl(rules: &[&str]) -> Acl {
    let policies: Vec<Policy> = rules.iter().map(|r| parse(r)).collect();
    Acl::from_policies(&policies)
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn parses_every_block_kind() {
    let p = parse(
        r#"
namespace "default" {
  policy = "read"
}
namespace "secret" {
  capabilities = ["deny", "read-logs"]
}
namespace "apps" {
  variables {
    path "project/*" {
      capabilities = ["read"]
    }
  }
}
host_volume "staging-tls-*" {
  policy = "write"
}
node_pool "dev" {
  policy = "write"
}
agent {
  policy = "read"
}
node {
  policy = "write"
}
operator {
  policy = "deny"
}
quota {
  policy = "read"
}
plugin {
  policy = "list"
}
"#,
    );
    assert_eq!(p.namespaces.len(), 3);
    assert_eq!(p.namespaces[0].name, "default");
    assert_eq!(p.namespaces[0].policy, Some(PolicyLevel::Read));
    assert_eq!(strs(&p.namespaces[1].capabilities), ["deny", "read-logs"]);
    let vars = p.namespaces[2].variables.as_ref().map(|v| v.paths.clone());
    assert_eq!(
        vars,
        Some(vec![VariablesPathPolicy {
            path_spec: "project/*".into(),
            capabilities: vec!["read".into(), "list".into()],
        }])
    );
    assert_eq!(
        strs(&p.host_volumes[0].capabilities),
        ["mount-readonly", "mount-readwrite"]
    );
    assert_eq!(
        strs(&p.node_pools[0].capabilities),
        ["delete", "read", "write"]
    );
    assert_eq!(p.agent, Some(PolicyLevel::Read));
    assert_eq!(p.node, Some(PolicyLevel::Write));
    assert_eq!(
        p.operator,
        Some(OperatorPolicy {
            policy: Some(PolicyLevel::Deny),
            capabilities: vec!["deny".into()],
        })
    );
    assert_eq!(p.quota, Some(PolicyLevel::Read));
    assert_eq!(p.plugin, Some(PolicyLevel::List));
    assert!(p.raw.contains("staging-tls-*"));
}

#[test]
fn namespace_policies_expand_like_nomads() {
    let read = [
        CAP_LIST_JOBS,
        CAP_PARSE_JOB,
        CAP_READ_JOB,
        CAP_CSI_LIST_VOLUME,
        CAP_CSI_READ_VOLUME,
        CAP_READ_JOB_SCALING,
        CAP_LIST_SCALING_POLICIES,
        CAP_READ_SCALING_POLICY,
        CAP_HOST_VOLUME_READ,
    ];
    let p = parse(r#"namespace "a" { policy = "read" }"#);
    assert_eq!(strs(&p.namespaces[0].capabilities), read);

    let p = parse(r#"namespace "a" { policy = "write" }"#);
    let mut write = read.to_vec();
    write.extend([
        CAP_SCALE_JOB,
        CAP_SUBMIT_JOB,
        CAP_DISPATCH_JOB,
        CAP_READ_LOGS,
        CAP_READ_FS,
        CAP_ALLOC_EXEC,
        CAP_ALLOC_LIFECYCLE,
        CAP_CSI_MOUNT_VOLUME,
        CAP_CSI_WRITE_VOLUME,
        CAP_SUBMIT_RECOMMENDATION,
        CAP_HOST_VOLUME_CREATE,
    ]);
    assert_eq!(strs(&p.namespaces[0].capabilities), write);
    assert!(!write.contains(&CAP_ALLOC_NODE_EXEC));
    assert!(!write.contains(&CAP_CSI_REGISTER_PLUGIN));

    let p = parse(r#"namespace "a" { policy = "scale" }"#);
    assert_eq!(
        strs(&p.namespaces[0].capabilities),
        [
            CAP_LIST_SCALING_POLICIES,
            CAP_READ_SCALING_POLICY,
            CAP_READ_JOB_SCALING,
            CAP_SCALE_JOB,
            CAP_READ_JOB,
            CAP_SUBMIT_RECOMMENDATION
        ]
    );

    let p = parse(r#"namespace "a" { policy = "deny" }"#);
    assert_eq!(strs(&p.namespaces[0].capabilities), [CAP_DENY]);

    // Listed capabilities come first, then the policy's.
    let p = parse("namespace \"a\" {\n  policy = \"read\"\n  capabilities = [\"alloc-exec\"]\n}\n");
    assert_eq!(p.namespaces[0].capabilities[0], CAP_ALLOC_EXEC);
    assert_eq!(p.namespaces[0].capabilities.len(), read.len() + 1);
}

#[test]
fn host_volume_capabilities_imply_others() {
    let p = parse(
        r#"
namespace "default" {
  capabilities = ["host-volume-register"]
}
namespace "other" {
  capabilities = ["host-volume-create"]
}
namespace "foo" {
  capabilities = ["host-volume-write"]
}
host_volume "ro" {
  policy = "read"
}
"#,
    );
    assert_eq!(
        strs(&p.namespaces[0].capabilities),
        [
            "host-volume-register",
            "host-volume-create",
            "host-volume-read"
        ]
    );
    assert_eq!(
        strs(&p.namespaces[1].capabilities),
        ["host-volume-create", "host-volume-read"]
    );
    assert_eq!(
        strs(&p.namespaces[2].capabilities),
        [
            "host-volume-write",
            "host-volume-register",
            "host-volume-create",
            "host-volume-delete",
            "host-volume-read"
        ]
    );
    assert_eq!(strs(&p.host_volumes[0].capabilities), ["mount-readonly"]);
}

#[test]
fn invalid_policies_and_capabilities_are_refused_with_nomads_words() {
    let e = parse_err("namespace \"default\" {\n  policy = \"foo\"\n}\n");
    assert_eq!(e.kind, PolicyErrorKind::NamespacePolicy);
    assert_eq!(
        e.to_string(),
        "Invalid namespace policy: \"foo\" in namespace \"default\" (at 2:3)"
    );

    let e = parse_err("namespace \"default\" {\n  capabilities = [\"deny\", \"foo\"]\n}\n");
    assert_eq!(e.kind, PolicyErrorKind::NamespaceCapability);
    assert_eq!(
        e.location,
        Some(Location {
            line: 2,
            column: 27
        })
    );
    assert!(
        e.to_string()
            .starts_with("Invalid namespace capability 'foo'"),
        "{e}"
    );

    for (rules, kind, words) in [
        (
            "namespace {\n policy = \"read\"\n}",
            PolicyErrorKind::NamespaceName,
            "Invalid namespace name",
        ),
        (
            "namespace \"has a space\" {\n policy = \"read\"\n}",
            PolicyErrorKind::NamespaceName,
            "Invalid namespace name",
        ),
        (
            "agent {\n policy = \"foo\"\n}",
            PolicyErrorKind::AgentPolicy,
            "Invalid agent policy",
        ),
        (
            "agent {\n}",
            PolicyErrorKind::AgentPolicy,
            "Invalid agent policy",
        ),
        (
            "node {\n policy = \"foo\"\n}",
            PolicyErrorKind::NodePolicy,
            "Invalid node policy",
        ),
        (
            "node {\n policy = \"list\"\n}",
            PolicyErrorKind::NodePolicy,
            "Invalid node policy",
        ),
        (
            "operator {\n policy = \"foo\"\n}",
            PolicyErrorKind::OperatorPolicy,
            "Invalid operator policy",
        ),
        (
            "operator {\n capabilities = [\"x\"]\n}",
            PolicyErrorKind::OperatorCapability,
            "Invalid operator capability 'x'",
        ),
        (
            "quota {\n policy = \"foo\"\n}",
            PolicyErrorKind::QuotaPolicy,
            "Invalid quota policy",
        ),
        (
            "plugin {\n policy = \"reader\"\n}",
            PolicyErrorKind::PluginPolicy,
            "Invalid plugin policy",
        ),
        (
            "plugin {\n policy = \"scale\"\n}",
            PolicyErrorKind::PluginPolicy,
            "Invalid plugin policy",
        ),
        (
            "host_volume \"volume has a space\" {\n policy = \"read\"\n}",
            PolicyErrorKind::HostVolumeName,
            "Invalid host volume name",
        ),
        (
            "host_volume {\n policy = \"read\"\n}",
            PolicyErrorKind::HostVolumeName,
            "Invalid host volume name",
        ),
        (
            "host_volume \"v\" {\n policy = \"foo\"\n}",
            PolicyErrorKind::HostVolumePolicy,
            "Invalid host volume policy",
        ),
        (
            "host_volume \"v\" {\n capabilities = [\"mount\"]\n}",
            PolicyErrorKind::HostVolumeCapability,
            "Invalid host volume capability 'mount'",
        ),
        (
            "node_pool \"pool%\" {\n}",
            PolicyErrorKind::NodePoolName,
            "Invalid node pool name 'pool%'",
        ),
        (
            "node_pool \"p\" {\n policy = \"foo\"\n}",
            PolicyErrorKind::NodePoolPolicy,
            "Invalid node pool policy 'foo' for 'p'",
        ),
        (
            "node_pool \"my-pool\" {\n capabilities = [\"read\", \"invalid\"]\n}",
            PolicyErrorKind::NodePoolCapability,
            "Invalid node pool capability 'invalid' for 'my-pool'",
        ),
        (
            "namespace \"dev\" {\n variables \"*\" {\n  capabilities = [\"read\"]\n }\n}",
            PolicyErrorKind::Variables,
            "Invalid variable policy: no variable paths in namespace dev",
        ),
        (
            "namespace \"dev\" {\n variables {\n  path \"/nomad/job\" {\n   capabilities = [\"read\"]\n  }\n }\n}",
            PolicyErrorKind::Variables,
            "Invalid variable path \"/nomad/job\" in namespace dev: cannot start with a leading '/'",
        ),
        (
            "namespace \"dev\" {\n variables {\n  path {}\n }\n}",
            PolicyErrorKind::Variables,
            "Invalid missing variable path in namespace dev",
        ),
        (
            "namespace \"dev\" {\n variables {\n  path \"a\" {\n   capabilities = [\"x\"]\n  }\n }\n}",
            PolicyErrorKind::Variables,
            "Invalid variable capability 'x' in namespace dev",
        ),
    ] {
        let e = parse_err(rules);
        assert_eq!(e.kind, kind, "{rules}: {e}");
        assert!(e.to_string().starts_with(words), "{rules}: {e}");
    }
}

#[test]
fn shape_and_syntax_errors_say_where() {
    let e = parse_err("namespace \"a\" {\n  policy = \n}\n");
    assert_eq!(e.kind, PolicyErrorKind::Syntax);
    assert!(
        e.to_string().starts_with("Failed to parse ACL Policy: At "),
        "{e}"
    );

    let e = parse_err("namespace \"a\" {\n  policy = [\"read\"]\n}\n");
    assert_eq!(
        e.to_string(),
        "Failed to parse ACL Policy: At 2:3: policy: expected a string, got a list"
    );
    let e = parse_err("namespace \"a\" {\n  capabilities = \"read-job\"\n}\n");
    assert_eq!(e.location, Some(Location { line: 2, column: 3 }));
    let e = parse_err("namespace \"a\" {\n  policy = var.p\n}\n");
    assert!(e.to_string().contains("literal values only"), "{e}");
    let e = parse_err("agent = \"read\"\n");
    assert!(e.to_string().contains("agent: expected a block"), "{e}");
    let e = parse_err("{\"namespace\": {\"a\": {\"policy\": }}}");
    assert_eq!(e.kind, PolicyErrorKind::Syntax);
    assert!(
        e.to_string()
            .starts_with("Failed to parse ACL Policy: At 1:"),
        "{e}"
    );
}

#[test]
fn empty_and_unknown_keys() {
    assert_eq!(parse("").raw, "");
    let e = parse_err("  \n");
    assert_eq!(e.kind, PolicyErrorKind::Empty);
    let e = parse_err(r#"{"Name": "my-policy", "Rules": "anything"}"#);
    assert!(e.to_string().starts_with("Invalid policy"), "{e}");

    let e = parse_err(
        r#"
namespace "foo" {
  policy = "write"
}
namespace "bar" {
  policy = "write"
}
bogus {
  policy = "read"
}
anotherbogus {
  policy = "write"
}
node {
  policy = "read"
}
node {
  policy = "write"
}
agent {
  policy = "read"
}
agent {
  policy = "write"
}
plugin {
  policy = "read"
}
plugin {
  policy = "write"
}
host_volume "a" {
  policy = "read"
}
host_volume "b" {
  policy = "write"
}
"#,
    );
    assert_eq!(e.kind, PolicyErrorKind::UnknownKeys);
    assert!(
        e.to_string().starts_with(
            "Invalid or duplicate policy keys: agent, anotherbogus, bogus, node, plugin"
        ),
        "{e}"
    );
}

#[test]
fn json_rules_parse_like_hcl() {
    // Nomad's own JSON example, trailing commas included (HCL1 takes them).
    let p = parse(
        r#"
{
  "namespace": [
    { "default": { "policy": "read" }, },
    { "secret": { "capabilities": ["deny", "read-logs"] } },
    { "apps": { "variables": [ { "path": [
        { "project/read-implies-list": { "capabilities": ["read"], }, },
    ] } ] } },
  ],
  "host_volume": [ { "production-tls-*": { "capabilities": ["mount-readonly"] } } ],
  "node_pool": { "dev": { "policy": "write" } },
  "agent": { "policy": "read" },
  "node": { "policy": "write" },
  "operator": { "policy": "deny" },
  "quota": { "policy": "read" },
  "plugin": { "policy": "read" }
}"#,
    );
    let hcl = parse(
        r#"
namespace "default" {
  policy = "read"
}
namespace "secret" {
  capabilities = ["deny", "read-logs"]
}
namespace "apps" {
  variables {
    path "project/read-implies-list" {
      capabilities = ["read"]
    }
  }
}
host_volume "production-tls-*" {
  capabilities = ["mount-readonly"]
}
node_pool "dev" {
  policy = "write"
}
agent {
  policy = "read"
}
node {
  policy = "write"
}
operator {
  policy = "deny"
}
quota {
  policy = "read"
}
plugin {
  policy = "read"
}
"#,
    );
    assert_eq!(
        Policy {
            raw: String::new(),
            ..p
        },
        Policy {
            raw: String::new(),
            ..hcl
        }
    );

    let e = parse_err(r#"{"namespace": [{"": {"policy": "read"}}]}"#);
    assert_eq!(e.kind, PolicyErrorKind::NamespaceName);
    let e =
        parse_err(r#"{"namespace": {"dev": {"policy": "read", "variables": [{"paths": []}]}}}"#);
    assert!(
        e.to_string().contains("no variable paths in namespace dev"),
        "{e}"
    );
    let e = parse_err(r#"{"agent": "read"}"#);
    assert_eq!(
        e.to_string(),
        "Failed to parse ACL Policy: agent: expected an object, got a string"
    );
}

#[test]
fn merging_deny_wins_and_write_beats_read() {
    let a = acl(&[
        "namespace \"default\" {\n  policy = \"write\"\n}\nagent {\n  policy = \"read\"\n}\nnode {\n  policy = \"write\"\n}\n",
        "namespace \"default\" {\n  policy = \"deny\"\n}\nagent {\n  policy = \"write\"\n}\nnode {\n  policy = \"deny\"\n}\n",
        "namespace \"default\" {\n  policy = \"write\"\n}\n",
        "namespace \"other\" {\n  policy = \"read\"\n}\nnamespace \"other\" {\n  capabilities = [\"read-logs\"]\n}\n",
    ]);
    assert!(!a.allow_namespace("default"));
    assert!(!a.allow_namespace_operation("default", CAP_READ_JOB));
    assert!(a.allow_agent_read() && a.allow_agent_write());
    assert!(!a.allow_node_read() && !a.allow_node_write());
    // Capabilities are unioned.
    assert!(a.allow_namespace_operation("other", CAP_READ_JOB));
    assert!(a.allow_namespace_operation("other", CAP_READ_LOGS));
    assert!(!a.allow_namespace_operation("other", CAP_SUBMIT_JOB));

    // Deny in a later policy clears what came before; deny in the same rule too.
    let a = acl(&["namespace \"x\" {\n  capabilities = [\"read-job\", \"deny\"]\n}\n"]);
    assert!(!a.allow_namespace_operation("x", CAP_READ_JOB));

    let a = acl(&[
        "operator {\n  policy = \"read\"\n}\nquota {\n  policy = \"read\"\n}\n",
        "operator {\n  policy = \"write\"\n}\n",
    ]);
    assert!(a.allow_operator_read() && a.allow_operator_write());
    assert!(a.allow_operator_operation(OPERATOR_CAP_SNAPSHOT_SAVE));
    assert!(a.allow_quota_read() && !a.allow_quota_write());
}

#[test]
fn coarse_levels_follow_nomads_checks() {
    let a = acl(&["plugin {\n  policy = \"write\"\n}\n"]);
    // Nomad reads and lists plugins only with read (or list for listing).
    assert!(!a.allow_plugin_read() && !a.allow_plugin_list());
    let a = acl(&["plugin {\n  policy = \"list\"\n}\n"]);
    assert!(!a.allow_plugin_read() && a.allow_plugin_list());
    let a = acl(&["plugin {\n  policy = \"read\"\n}\n"]);
    assert!(a.allow_plugin_read() && a.allow_plugin_list());
    let a = acl(&["agent {\n  policy = \"scale\"\n}\n"]);
    assert!(!a.allow_agent_read());
    let a = acl(&[]);
    assert!(!a.allow_agent_read() && !a.allow_node_read() && !a.allow_namespace("default"));
    assert!(!a.allow_namespace("*") && !a.is_management());
}

#[test]
fn glob_precedence_exact_then_closest() {
    let a = acl(&[r#"
namespace "*" {
  policy = "read"
}
namespace "dev-*" {
  policy = "write"
}
namespace "dev-team" {
  policy = "deny"
}
"#]);
    assert!(!a.allow_namespace("dev-team"));
    assert!(!a.allow_namespace_operation("dev-team", CAP_READ_JOB));
    assert!(a.allow_namespace_operation("dev-other", CAP_SUBMIT_JOB));
    assert!(a.allow_namespace_operation("prod", CAP_READ_JOB));
    assert!(!a.allow_namespace_operation("prod", CAP_SUBMIT_JOB));

    // The glob covering more of the name wins; among equally close ones the last in byte
    // order, as Nomad's stable sort with `<=` leaves it.
    let a = acl(&[r#"
namespace "*-prod" {
  capabilities = ["read-job"]
}
namespace "team-*" {
  capabilities = ["read-logs"]
}
namespace "team-a-*" {
  capabilities = ["submit-job"]
}
"#]);
    assert!(a.allow_namespace_operation("team-a-prod", CAP_SUBMIT_JOB));
    // "*-prod" and "team-*" are equally close to "team-b-prod": "team-*" sorts last.
    assert!(a.allow_namespace_operation("team-b-prod", CAP_READ_LOGS));
    assert!(!a.allow_namespace_operation("team-b-prod", CAP_READ_JOB));
    assert!(a.allow_namespace_operation("team-b", CAP_READ_LOGS));
    assert!(a.allow_namespace_operation("web-prod", CAP_READ_JOB));
    let a = acl(&[
        "namespace \"*-cd\" {\n  capabilities = [\"read-job\"]\n}\n",
        "namespace \"ab-*\" {\n  capabilities = [\"read-logs\"]\n}\n",
    ]);
    assert!(a.allow_namespace_operation("ab-cd", CAP_READ_LOGS));
    assert!(!a.allow_namespace_operation("ab-cd", CAP_READ_JOB));

    // An exact rule granting nothing still hides the globs.
    let a = acl(&["namespace \"*\" {\n  policy = \"write\"\n}\nnamespace \"quiet\" {}\n"]);
    assert!(!a.allow_namespace("quiet"));
}

#[test]
fn all_namespaces_request_asks_whether_any_rule_grants() {
    let a = acl(&[
        "namespace \"dev\" {\n  policy = \"read\"\n}\nnamespace \"prod\" {\n  policy = \"deny\"\n}\n",
    ]);
    assert!(a.allow_namespace("*"));
    assert!(a.allow_namespace_operation("*", CAP_LIST_JOBS));
    assert!(!a.allow_namespace_operation("*", CAP_SUBMIT_JOB));
    let a = acl(&["namespace \"prod\" {\n  policy = \"deny\"\n}\n"]);
    assert!(!a.allow_namespace("*"));
}

#[test]
fn host_volumes_and_node_pools_match_globs() {
    let a = acl(&[r#"
host_volume "prod-*" {
  policy = "read"
}
host_volume "prod-db" {
  policy = "write"
}
node_pool "gpu-*" {
  capabilities = ["read"]
}
node_pool "gpu_big" {
  policy = "deny"
}
"#]);
    assert!(a.allow_host_volume_operation("prod-db", HOST_VOLUME_CAP_MOUNT_READWRITE));
    assert!(a.allow_host_volume_operation("prod-web", HOST_VOLUME_CAP_MOUNT_READONLY));
    assert!(!a.allow_host_volume_operation("prod-web", HOST_VOLUME_CAP_MOUNT_READWRITE));
    assert!(!a.allow_host_volume("dev-x"));
    assert!(a.allow_node_pool_operation("gpu-a", NODE_POOL_CAP_READ));
    assert!(!a.allow_node_pool_operation("gpu-a", NODE_POOL_CAP_WRITE));
    assert!(!a.allow_node_pool("gpu_big"));
}

#[test]
fn management_acl_allows_everything() {
    let m = Acl::management();
    assert!(m.is_management());
    assert!(m.allow_namespace_operation("anything", CAP_ALLOC_NODE_EXEC));
    assert!(m.allow_namespace("*"));
    assert!(m.allow_host_volume_operation("v", HOST_VOLUME_CAP_MOUNT_READWRITE));
    assert!(m.allow_node_pool_operation("p", NODE_POOL_CAP_DELETE));
    assert!(m.allow_node_write() && m.allow_agent_write() && m.allow_operator_write());
    assert!(m.allow_quota_read() && m.allow_plugin_read() && m.allow_plugin_list());
    assert!(!Acl::from_policies(&[]).is_management());
}

#[test]
fn globs_match_as_go_glob_does() {
    for (pattern, subject, want) in [
        ("*", "", true),
        ("*", "anything", true),
        ("dev-*", "dev-team", true),
        ("dev-*", "dev", false),
        ("*-prod", "web-prod", true),
        ("*-prod", "web-prod-2", false),
        ("a*b*c", "aXbYc", true),
        ("a*b*c", "acb", false),
        ("a*a", "a", false),
        ("**x", "", false),
        ("x", "x", true),
        ("", "", true),
        ("", "x", false),
    ] {
        assert_eq!(glob_match(pattern, subject), want, "{pattern} ~ {subject}");
    }
}

#[test]
fn every_namespace_capability_is_accepted() {
    for cap in NAMESPACE_CAPABILITIES {
        let p = parse(&format!(
            "namespace \"n\" {{\n  capabilities = [\"{cap}\"]\n}}\n"
        ));
        assert!(p.namespaces[0].capabilities.iter().any(|c| c == cap));
    }
    assert_eq!(NAMESPACE_CAPABILITIES.len(), 45);
}

#[test]
fn variables_are_granted_by_their_path_rules_only_the_exact_or_closest_glob_winning() {
    let a = acl(&[r#"
namespace "dev" {
  policy = "write"
  variables {
    path "app/*" { capabilities = ["read"] }
    path "app/secret" { capabilities = ["deny"] }
    path "app/db/*" { capabilities = ["write", "destroy"] }
  }
}
namespace "ops-*" {
  variables {
    path "*" { capabilities = ["list"] }
  }
}
"#]);
    assert!(a.allow_variable_operation("dev", "app/x", "read"));
    assert!(
        a.allow_variable_operation("dev", "app/x", "list"),
        "read implies list"
    );
    assert!(!a.allow_variable_operation("dev", "app/x", "write"));
    assert!(!a.allow_variable_operation("dev", "app/secret", "read"));
    assert!(a.allow_variable_operation("dev", "app/db/main", "write"));
    assert!(!a.allow_variable_operation("dev", "app/db/main", "read"));
    // The namespace's policy = "write" grants no variables; other namespaces get nothing.
    assert!(!a.allow_variable_operation("dev", "other", "read"));
    assert!(!a.allow_variable_operation("default", "app/x", "read"));
    assert!(a.allow_variable_operation("ops-1", "any/path", "list"));
    assert!(!a.allow_variable_operation("ops-1", "any/path", "read"));
    assert!(Acl::management().allow_variable_operation("x", "y", "destroy"));
}
