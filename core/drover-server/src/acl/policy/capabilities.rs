//! Capability names of Nomad's policy language (its `*Capability*` constants, same strings)
//! and what each `policy = "..."` shorthand expands to.

use super::PolicyLevel;

/// Namespace capabilities (Nomad's `NamespaceCapability*`). `deny` overrides everything else.
pub const CAP_DENY: &str = "deny";
pub const CAP_LIST_JOBS: &str = "list-jobs";
pub const CAP_PARSE_JOB: &str = "parse-job";
pub const CAP_READ_JOB: &str = "read-job";
pub const CAP_SUBMIT_JOB: &str = "submit-job";
pub const CAP_DISPATCH_JOB: &str = "dispatch-job";
pub const CAP_READ_LOGS: &str = "read-logs";
pub const CAP_READ_FS: &str = "read-fs";
pub const CAP_ALLOC_EXEC: &str = "alloc-exec";
pub const CAP_ALLOC_NODE_EXEC: &str = "alloc-node-exec";
pub const CAP_ALLOC_LIFECYCLE: &str = "alloc-lifecycle";
pub const CAP_SENTINEL_OVERRIDE: &str = "sentinel-override";
pub const CAP_CSI_REGISTER_PLUGIN: &str = "csi-register-plugin";
pub const CAP_CSI_WRITE_VOLUME: &str = "csi-write-volume";
pub const CAP_CSI_READ_VOLUME: &str = "csi-read-volume";
pub const CAP_CSI_LIST_VOLUME: &str = "csi-list-volume";
pub const CAP_CSI_MOUNT_VOLUME: &str = "csi-mount-volume";
pub const CAP_HOST_VOLUME_CREATE: &str = "host-volume-create";
pub const CAP_HOST_VOLUME_REGISTER: &str = "host-volume-register";
pub const CAP_HOST_VOLUME_READ: &str = "host-volume-read";
pub const CAP_HOST_VOLUME_WRITE: &str = "host-volume-write";
pub const CAP_HOST_VOLUME_DELETE: &str = "host-volume-delete";
pub const CAP_LIST_SCALING_POLICIES: &str = "list-scaling-policies";
pub const CAP_READ_SCALING_POLICY: &str = "read-scaling-policy";
pub const CAP_READ_JOB_SCALING: &str = "read-job-scaling";
pub const CAP_SCALE_JOB: &str = "scale-job";
pub const CAP_SUBMIT_RECOMMENDATION: &str = "submit-recommendation";
pub const CAP_REGISTER_JOB: &str = "register-job";
pub const CAP_REVERT_JOB: &str = "revert-job";
pub const CAP_DEREGISTER_JOB: &str = "deregister-job";
pub const CAP_PURGE_JOB: &str = "purge-job";
pub const CAP_EVALUATE_JOB: &str = "evaluate-job";
pub const CAP_PLAN_JOB: &str = "plan-job";
pub const CAP_TAG_JOB_VERSION: &str = "tag-job-version";
pub const CAP_STABLE_JOB: &str = "stable-job";
pub const CAP_FAIL_DEPLOYMENT: &str = "fail-deployment";
pub const CAP_PAUSE_DEPLOYMENT: &str = "pause-deployment";
pub const CAP_PROMOTE_DEPLOYMENT: &str = "promote-deployment";
pub const CAP_UNBLOCK_DEPLOYMENT: &str = "unblock-deployment";
pub const CAP_CANCEL_DEPLOYMENT: &str = "cancel-deployment";
pub const CAP_SET_ALLOC_HEALTH_DEPLOYMENT: &str = "set-alloc-health-deployment";
pub const CAP_GC_ALLOCATION: &str = "gc-allocation";
pub const CAP_PAUSE_ALLOCATION: &str = "pause-allocation";
pub const CAP_FORCE_PERIODIC_JOB: &str = "force-periodic-job";
pub const CAP_DELETE_SERVICE_REGISTRATION: &str = "delete-service-registration";

/// Every capability a `namespace` rule may list (Nomad's `isNamespaceCapabilityValid`).
pub const NAMESPACE_CAPABILITIES: &[&str] = &[
    CAP_DENY,
    CAP_LIST_JOBS,
    CAP_PARSE_JOB,
    CAP_READ_JOB,
    CAP_SUBMIT_JOB,
    CAP_DISPATCH_JOB,
    CAP_READ_LOGS,
    CAP_READ_FS,
    CAP_ALLOC_EXEC,
    CAP_ALLOC_NODE_EXEC,
    CAP_ALLOC_LIFECYCLE,
    CAP_SENTINEL_OVERRIDE,
    CAP_CSI_REGISTER_PLUGIN,
    CAP_CSI_WRITE_VOLUME,
    CAP_CSI_READ_VOLUME,
    CAP_CSI_LIST_VOLUME,
    CAP_CSI_MOUNT_VOLUME,
    CAP_HOST_VOLUME_CREATE,
    CAP_HOST_VOLUME_REGISTER,
    CAP_HOST_VOLUME_READ,
    CAP_HOST_VOLUME_WRITE,
    CAP_HOST_VOLUME_DELETE,
    CAP_LIST_SCALING_POLICIES,
    CAP_READ_SCALING_POLICY,
    CAP_READ_JOB_SCALING,
    CAP_SCALE_JOB,
    CAP_SUBMIT_RECOMMENDATION,
    CAP_REGISTER_JOB,
    CAP_REVERT_JOB,
    CAP_DEREGISTER_JOB,
    CAP_PURGE_JOB,
    CAP_EVALUATE_JOB,
    CAP_PLAN_JOB,
    CAP_TAG_JOB_VERSION,
    CAP_STABLE_JOB,
    CAP_FAIL_DEPLOYMENT,
    CAP_PAUSE_DEPLOYMENT,
    CAP_PROMOTE_DEPLOYMENT,
    CAP_UNBLOCK_DEPLOYMENT,
    CAP_CANCEL_DEPLOYMENT,
    CAP_SET_ALLOC_HEALTH_DEPLOYMENT,
    CAP_GC_ALLOCATION,
    CAP_PAUSE_ALLOCATION,
    CAP_FORCE_PERIODIC_JOB,
    CAP_DELETE_SERVICE_REGISTRATION,
];

/// Host volume capabilities (Nomad's `HostVolumeCapability*`).
pub const HOST_VOLUME_CAP_DENY: &str = "deny";
pub const HOST_VOLUME_CAP_MOUNT_READONLY: &str = "mount-readonly";
pub const HOST_VOLUME_CAP_MOUNT_READWRITE: &str = "mount-readwrite";
pub(super) const HOST_VOLUME_CAPABILITIES: &[&str] = &[
    HOST_VOLUME_CAP_DENY,
    HOST_VOLUME_CAP_MOUNT_READONLY,
    HOST_VOLUME_CAP_MOUNT_READWRITE,
];

/// Node pool capabilities (Nomad's `NodePoolCapability*`).
pub const NODE_POOL_CAP_DELETE: &str = "delete";
pub const NODE_POOL_CAP_DENY: &str = "deny";
pub const NODE_POOL_CAP_READ: &str = "read";
pub const NODE_POOL_CAP_WRITE: &str = "write";
pub(super) const NODE_POOL_CAPABILITIES: &[&str] = &[
    NODE_POOL_CAP_DELETE,
    NODE_POOL_CAP_DENY,
    NODE_POOL_CAP_READ,
    NODE_POOL_CAP_WRITE,
];

/// Variables path capabilities (Nomad's `VariablesCapability*`).
pub const VARIABLES_CAP_LIST: &str = "list";
pub const VARIABLES_CAP_READ: &str = "read";
pub const VARIABLES_CAP_WRITE: &str = "write";
pub const VARIABLES_CAP_DESTROY: &str = "destroy";
pub const VARIABLES_CAP_DENY: &str = "deny";
pub(super) const VARIABLES_CAPABILITIES: &[&str] = &[
    VARIABLES_CAP_LIST,
    VARIABLES_CAP_READ,
    VARIABLES_CAP_WRITE,
    VARIABLES_CAP_DESTROY,
    VARIABLES_CAP_DENY,
];

/// Operator capabilities (Nomad's `OperatorCapability*`).
pub const OPERATOR_CAP_DENY: &str = "deny";
pub const OPERATOR_CAP_SNAPSHOT_SAVE: &str = "snapshot-save";
pub const OPERATOR_CAP_LICENSE_READ: &str = "license-read";
pub(super) const OPERATOR_CAPABILITIES: &[&str] = &[
    OPERATOR_CAP_DENY,
    OPERATOR_CAP_SNAPSHOT_SAVE,
    OPERATOR_CAP_LICENSE_READ,
];

// ---- expansion ----------------------------------------------------------------------------

const NAMESPACE_READ: &[&str] = &[
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

/// What `write` adds to `read`.
const NAMESPACE_WRITE_EXTRA: &[&str] = &[
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
];

const NAMESPACE_SCALE: &[&str] = &[
    CAP_LIST_SCALING_POLICIES,
    CAP_READ_SCALING_POLICY,
    CAP_READ_JOB_SCALING,
    CAP_SCALE_JOB,
    CAP_READ_JOB,
    CAP_SUBMIT_RECOMMENDATION,
];

/// The capabilities a namespace `policy` stands for (Nomad's `expandNamespacePolicy`).
pub fn expand_namespace_policy(level: PolicyLevel) -> Vec<&'static str> {
    match level {
        PolicyLevel::Deny => vec![CAP_DENY],
        PolicyLevel::Read => NAMESPACE_READ.to_vec(),
        PolicyLevel::Write => [NAMESPACE_READ, NAMESPACE_WRITE_EXTRA].concat(),
        PolicyLevel::Scale => NAMESPACE_SCALE.to_vec(),
        PolicyLevel::List => Vec::new(),
    }
}

/// Capabilities implied by others (Nomad's `expandNamespaceCapabilities`).
pub(super) fn implied_namespace_capabilities(cap: &str) -> &'static [&'static str] {
    match cap {
        CAP_HOST_VOLUME_WRITE => &[
            CAP_HOST_VOLUME_REGISTER,
            CAP_HOST_VOLUME_CREATE,
            CAP_HOST_VOLUME_DELETE,
            CAP_HOST_VOLUME_READ,
        ],
        CAP_HOST_VOLUME_REGISTER => &[CAP_HOST_VOLUME_CREATE, CAP_HOST_VOLUME_READ],
        CAP_HOST_VOLUME_CREATE => &[CAP_HOST_VOLUME_READ],
        _ => &[],
    }
}

/// The capabilities a host volume `policy` stands for (Nomad's `expandHostVolumePolicy`).
pub fn expand_host_volume_policy(level: PolicyLevel) -> Vec<&'static str> {
    match level {
        PolicyLevel::Deny => vec![HOST_VOLUME_CAP_DENY],
        PolicyLevel::Read => vec![HOST_VOLUME_CAP_MOUNT_READONLY],
        PolicyLevel::Write => vec![
            HOST_VOLUME_CAP_MOUNT_READONLY,
            HOST_VOLUME_CAP_MOUNT_READWRITE,
        ],
        PolicyLevel::List | PolicyLevel::Scale => Vec::new(),
    }
}

/// The capabilities a node pool `policy` stands for (Nomad's `expandNodePoolPolicy`).
pub fn expand_node_pool_policy(level: PolicyLevel) -> Vec<&'static str> {
    match level {
        PolicyLevel::Deny => vec![NODE_POOL_CAP_DENY],
        PolicyLevel::Read => vec![NODE_POOL_CAP_READ],
        PolicyLevel::Write => vec![
            NODE_POOL_CAP_DELETE,
            NODE_POOL_CAP_READ,
            NODE_POOL_CAP_WRITE,
        ],
        PolicyLevel::List | PolicyLevel::Scale => Vec::new(),
    }
}

/// The capabilities an operator `policy` stands for (Nomad's `expandOperatorPolicy`).
pub fn expand_operator_policy(level: PolicyLevel) -> Vec<&'static str> {
    match level {
        PolicyLevel::Deny => vec![OPERATOR_CAP_DENY],
        PolicyLevel::Read => vec![OPERATOR_CAP_LICENSE_READ],
        PolicyLevel::Write => vec![OPERATOR_CAP_SNAPSHOT_SAVE, OPERATOR_CAP_LICENSE_READ],
        PolicyLevel::List | PolicyLevel::Scale => Vec::new(),
    }
}
