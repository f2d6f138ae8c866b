//! The dependency arrows of ARCHITECTURE.md, checked against `cargo metadata`: a change that
//! breaks one (a core crate naming a concrete driver, the plugin contract pulling in tokio...)
//! fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Normal (non-dev, non-build) dependencies of every package, transitively, by package name.
fn dependency_closure() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1"])
        .current_dir(drover_tests::workspace_root())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let names: BTreeMap<String, String> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap_or_default().to_string(),
                p["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let mut direct: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for node in meta["resolve"]["nodes"].as_array().expect("resolve nodes") {
        let id = node["id"].as_str().unwrap_or_default();
        let deps = direct.entry(id.to_string()).or_default();
        for d in node["deps"].as_array().into_iter().flatten() {
            let normal = d["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null());
            if normal {
                deps.insert(d["pkg"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    let mut closure = BTreeMap::new();
    for id in direct.keys() {
        let mut seen = BTreeSet::new();
        let mut stack = vec![id.clone()];
        while let Some(cur) = stack.pop() {
            for d in direct.get(&cur).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    stack.push(d.clone());
                }
            }
        }
        let name = names[id].clone();
        closure.insert(name, seen.iter().map(|i| names[i].clone()).collect());
    }
    closure
}

fn check(
    closure: &BTreeMap<String, BTreeSet<String>>,
    krate: &str,
    forbidden: &[&str],
    why: &str,
    errors: &mut Vec<String>,
) {
    let Some(deps) = closure.get(krate) else {
        errors.push(format!("crate {krate} not found in the workspace"));
        return;
    };
    for f in forbidden {
        let hits: Vec<&String> = deps
            .iter()
            .filter(|d| {
                if let Some(prefix) = f.strip_suffix('*') {
                    d.starts_with(prefix)
                } else {
                    d.as_str() == *f
                }
            })
            .collect();
        if !hits.is_empty() {
            errors.push(format!(
                "{krate} must not depend on {f} ({why}); found {hits:?}"
            ));
        }
    }
}

const CORE: &[&str] = &[
    "drover-structs",
    "drover-jobspec",
    "drover-state",
    "drover-raft",
    "drover-scheduler",
    "drover-server",
    "drover-client",
    "drover-http",
    "drover-ui",
    "drover-mesh",
];

#[test]
fn dependency_arrows_of_architecture_md_hold() {
    let c = dependency_closure();
    let mut e = Vec::new();
    check(
        &c,
        "drover-abi",
        &["tokio", "tonic", "abi_stable", "drover-*"],
        "the plugin contract is plain data and traits",
        &mut e,
    );
    check(
        &c,
        "drover-structs",
        &["tokio", "redb", "raft", "axum", "drover-*"],
        "the model is plain data",
        &mut e,
    );
    check(
        &c,
        "drover-scheduler",
        &[
            "tokio",
            "redb",
            "raft",
            "drover-state",
            "drover-server",
            "drover-client",
        ],
        "the scheduler is pure logic over the State trait",
        &mut e,
    );
    check(
        &c,
        "drover-jobspec",
        &["tokio", "drover-state", "drover-server"],
        "parsing job files needs no runtime",
        &mut e,
    );
    check(
        &c,
        "drover-state",
        &[
            "raft",
            "redb",
            "drover-raft",
            "drover-server",
            "drover-scheduler",
        ],
        "the state store knows nothing of Raft",
        &mut e,
    );
    check(
        &c,
        "drover-raft",
        &["drover-*"],
        "Raft replicates opaque entries",
        &mut e,
    );
    check(
        &c,
        "drover-server",
        &["axum", "drover-http", "drover-client", "drover-plugin-host"],
        "the server never calls out to HTTP or clients",
        &mut e,
    );
    check(
        &c,
        "drover-client",
        &[
            "drover-server",
            "drover-state",
            "drover-raft",
            "drover-scheduler",
            "drover-http",
        ],
        "clients talk to servers only through their API",
        &mut e,
    );
    check(
        &c,
        "drover-http",
        &["drover-rpc"],
        "the API reaches other agents through the TunnelOpener trait",
        &mut e,
    );
    check(
        &c,
        "drover-ui",
        &["drover-*"],
        "the UI knows the API only as HTTP and JSON",
        &mut e,
    );
    check(
        &c,
        "drover-mesh",
        &[
            "drover-structs",
            "drover-state",
            "drover-server",
            "drover-client",
            "drover-http",
            "drover-abi",
            "drover-rpc",
        ],
        "the proxy runs as its own process and knows only its configuration file",
        &mut e,
    );
    for core in CORE {
        check(
            &c,
            core,
            &["drover-driver-*", "drover-plugin-host"],
            "core crates never name a concrete driver",
            &mut e,
        );
    }
    for driver in [
        "drover-driver-raw-exec",
        "drover-driver-exec",
        "drover-driver-mock",
    ] {
        check(
            &c,
            driver,
            &[
                "tokio",
                "drover-structs",
                "drover-client",
                "drover-server",
                "drover-plugin-host",
            ],
            "drivers implement the abi contract only",
            &mut e,
        );
    }
    // The docker driver talks to the daemon through bollard, which is async: it runs its own
    // small Tokio runtime internally behind the synchronous contract, so tokio is allowed
    // there. Everything else drivers must not depend on still applies.
    check(
        &c,
        "drover-driver-docker",
        &[
            "drover-structs",
            "drover-client",
            "drover-server",
            "drover-plugin-host",
        ],
        "drivers implement the abi contract only",
        &mut e,
    );
    // In-process plugins: the ABI crate, the SDK and kit plugin authors use, and the example.
    let plugin_side: Vec<&str> = CORE
        .iter()
        .copied()
        .chain(["tokio", "tonic", "drover-plugin-host", "drover-driver-*"])
        .collect();
    check(
        &c,
        "drover-abi-ffi",
        &[
            plugin_side.as_slice(),
            &["drover-plugin-sdk", "drover-driver-testkit"],
        ]
        .concat(),
        "the plugin ABI is abi_stable over drover-abi only",
        &mut e,
    );
    check(
        &c,
        "drover-driver-testkit",
        &plugin_side,
        "plugin authors build without the agent",
        &mut e,
    );
    // The SDK has no async stack and no feature that brings one: the sidecar runtime is the
    // crate drover-plugin-sidecar. The metadata unifies the features of the whole workspace
    // (the skeleton's sidecar is in it), so this is the check that a cdylib cannot get tokio or
    // tonic by feature unification.
    let agent_side: Vec<&str> = CORE
        .iter()
        .copied()
        .chain(["drover-plugin-host", "drover-driver-*"])
        .collect();
    for krate in ["drover-plugin-sdk", "skeleton-driver", "minimal-driver"] {
        check(
            &c,
            krate,
            &[
                agent_side.as_slice(),
                &[
                    "drover-driver-testkit",
                    "drover-plugin-sidecar",
                    "tokio",
                    "tonic",
                ],
            ]
            .concat(),
            "a cdylib plugin builds without the agent and without an async stack",
            &mut e,
        );
    }
    for krate in [
        "drover-plugin-sidecar",
        "skeleton-sidecar",
        "minimal-driver-sidecar",
    ] {
        check(
            &c,
            krate,
            &[agent_side.as_slice(), &["drover-driver-testkit"]].concat(),
            "plugin authors build without the agent",
            &mut e,
        );
    }
    check(
        &c,
        "drover-plugin-proto",
        &["drover-*"],
        "the protocol crate is the wire only: tonic/prost code and its encodings",
        &mut e,
    );
    check(
        &c,
        "drover-csi",
        &["drover-*"],
        "the CSI crate is the protocol and its model, usable by client and server alike",
        &mut e,
    );
    let csi_plugin_side: Vec<&str> = CORE
        .iter()
        .copied()
        .chain(["drover-plugin-host", "drover-driver-*", "drover-abi*"])
        .collect();
    check(
        &c,
        "drover-csi-hostpath",
        &csi_plugin_side,
        "a CSI plugin is an ordinary program speaking CSI, nothing of the agent",
        &mut e,
    );
    assert!(
        e.is_empty(),
        "broken dependency arrows:\n  {}",
        e.join("\n  ")
    );
}

/// Normal dependencies of `packages` built on their own, with the features only they enable
/// (`cargo tree` resolves features for the packages selected, unlike `cargo metadata`).
fn own_build_dependencies(packages: &[&str]) -> BTreeSet<String> {
    let mut args = vec![
        "tree", "-e", "normal", "--prefix", "none", "--format", "{p}",
    ];
    for p in packages {
        args.extend(["-p", p]);
    }
    let out = Command::new(env!("CARGO"))
        .args(&args)
        .current_dir(drover_tests::workspace_root())
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn cdylib_plugins_build_without_tokio_or_tonic() {
    for package in ["drover-plugin-sdk", "skeleton-driver"] {
        let deps = own_build_dependencies(&[package]);
        for runtime in ["tokio", "tonic"] {
            assert!(
                !deps.contains(runtime),
                "{package} built alone pulls in {runtime}; the async stack is drover-plugin-sidecar's"
            );
        }
    }
    // The check can fail: the sidecar example does depend on them.
    assert!(own_build_dependencies(&["skeleton-sidecar"]).contains("tokio"));
}

#[test]
fn the_checker_catches_a_broken_arrow() {
    // The binary registers the built-in drivers, so it depends on them: the same check applied
    // to it must report that, proving the check can fail.
    let c = dependency_closure();
    let mut e = Vec::new();
    check(&c, "drover", &["drover-driver-*"], "demonstration", &mut e);
    assert!(!e.is_empty());
}
