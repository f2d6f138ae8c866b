//! The shape of Nomad's `api` job structs: for every struct, its fields in
//! Nomad 1.1.2's JSON order with the HCL name each is decoded from.
//!
//! Fields flagged [`NEW`] appeared after Nomad 1.1.2; they are decoded but only
//! printed when set, so jobs that 1.1.2 accepts print exactly as 1.1.2 did.

/// The Go field is a pointer (or slice/map): unset prints as JSON null.
pub(crate) const PTR: u8 = 1;
/// Added after Nomad 1.1.2: printed only when set.
pub(crate) const NEW: u8 = 2;
/// The HCL attribute must be present.
pub(crate) const REQ: u8 = 4;
/// A string map that may also be written as an attribute (`meta = { ... }`).
pub(crate) const ATTR: u8 = 8;
/// `json:",omitempty"`: left out of the output when unset.
pub(crate) const OMIT: u8 = 16;
/// A list Nomad's job validation caps at one element (networks).
pub(crate) const ONE: u8 = 32;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Str,
    Int,
    Bool,
    /// `time.Duration`: a Go duration string or a number of nanoseconds.
    Dur,
    StrList,
    IntList,
    /// `map[string]string` written as a block of attributes.
    StrMap,
    /// `map[string][]string` (check headers).
    StrListMap,
    /// `map[string]interface{}`: driver config, scaling policy, envoy config.
    AnyMap,
    /// The block's first label.
    Label,
    /// `[]byte`, never settable from HCL.
    Bytes,
    Struct(&'static StructDef),
    List(&'static StructDef),
    /// `map[string]*T` keyed by block label (group volumes, gateway bind addresses).
    LabeledMap(&'static StructDef),
}

#[derive(Debug)]
pub(crate) struct Field {
    pub json: &'static str,
    /// Empty for fields the server sets and HCL cannot.
    pub hcl: &'static str,
    pub kind: Kind,
    pub flags: u8,
}

impl Field {
    pub(crate) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    pub(crate) fn is_block(&self) -> bool {
        matches!(
            self.kind,
            Kind::Struct(_)
                | Kind::List(_)
                | Kind::LabeledMap(_)
                | Kind::StrMap
                | Kind::StrListMap
                | Kind::AnyMap
        )
    }
}

/// Struct-specific decoding rules on top of the generic field walk.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Special {
    None,
    Job,
    Group,
    Task,
    Constraint,
    Affinity,
    Periodic,
    /// Port labels must be non-empty and unique (ignoring case) per network.
    Network,
}

#[derive(Debug)]
pub(crate) struct StructDef {
    /// The block name used in error messages.
    pub name: &'static str,
    /// How many labels the block takes (0 or 1).
    pub labels: usize,
    pub special: Special,
    pub fields: &'static [Field],
}

impl StructDef {
    pub(crate) fn attr_field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| {
            f.hcl == name && (!f.is_block() || (f.has(ATTR) && matches!(f.kind, Kind::StrMap)))
        })
    }

    pub(crate) fn block_field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.hcl == name && f.is_block())
    }
}

macro_rules! f {
    ($json:literal, $hcl:literal, $kind:expr) => {
        Field {
            json: $json,
            hcl: $hcl,
            kind: $kind,
            flags: 0,
        }
    };
    ($json:literal, $hcl:literal, $kind:expr, $flags:expr) => {
        Field {
            json: $json,
            hcl: $hcl,
            kind: $kind,
            flags: $flags,
        }
    };
}

macro_rules! def {
    ($id:ident, $name:literal, $labels:literal, $special:ident, [$($field:expr),* $(,)?]) => {
        pub(crate) static $id: StructDef = StructDef {
            name: $name,
            labels: $labels,
            special: Special::$special,
            fields: &[$($field),*],
        };
    };
}

use Kind::*;

// Tables read best one field per line, hence `rustfmt::skip`.

#[rustfmt::skip]
def!(JOB, "job", 1, Job, [
    f!("Region", "region", Str, PTR),
    f!("Namespace", "namespace", Str, PTR),
    f!("ID", "id", Str, PTR),
    f!("Name", "name", Str, PTR),
    f!("Type", "type", Str, PTR),
    f!("Priority", "priority", Int, PTR),
    f!("AllAtOnce", "all_at_once", Bool, PTR),
    f!("Datacenters", "datacenters", StrList, PTR),
    f!("NodePool", "node_pool", Str, PTR | NEW),
    f!("Constraints", "constraint", List(&CONSTRAINT), PTR),
    f!("Affinities", "affinity", List(&AFFINITY), PTR),
    f!("TaskGroups", "group", List(&TASK_GROUP), PTR),
    f!("Update", "update", Struct(&UPDATE), PTR),
    f!("Multiregion", "multiregion", Struct(&MULTIREGION), PTR),
    f!("Spreads", "spread", List(&SPREAD), PTR),
    f!("Periodic", "periodic", Struct(&PERIODIC), PTR),
    f!("ParameterizedJob", "parameterized", Struct(&PARAMETERIZED), PTR ),
    f!("Reschedule", "reschedule", Struct(&RESCHEDULE), PTR),
    f!("Migrate", "migrate", Struct(&MIGRATE), PTR),
    f!("Meta", "meta", StrMap, PTR | ATTR),
    f!("ConsulToken", "consul_token", Str, PTR),
    f!("VaultToken", "vault_token", Str, PTR),
    f!("UI", "ui", Struct(&JOB_UI), PTR | NEW),
    f!("Stop", "", Bool, PTR),
    f!("ParentID", "", Str, PTR),
    f!("Dispatched", "", Bool),
    f!("Payload", "", Bytes, PTR),
    f!("ConsulNamespace", "", Str, PTR),
    f!("VaultNamespace", "", Str, PTR),
    f!("NomadTokenID", "", Str, PTR),
    f!("Status", "", Str, PTR),
    f!("StatusDescription", "", Str, PTR),
    f!("Stable", "", Bool, PTR),
    f!("Version", "", Int, PTR),
    f!("SubmitTime", "", Int, PTR),
    f!("CreateIndex", "", Int, PTR),
    f!("ModifyIndex", "", Int, PTR),
    f!("JobModifyIndex", "", Int, PTR),
]);

#[rustfmt::skip]
def!(JOB_UI, "ui", 0, None, [
    f!("Description", "description", Str),
    f!("Links", "link", List(&JOB_UI_LINK), PTR),
]);

#[rustfmt::skip]
def!(JOB_UI_LINK, "link", 0, None, [
    f!("Label", "label", Str),
    f!("URL", "url", Str),
]);

#[rustfmt::skip]
def!(CONSTRAINT, "constraint", 0, Constraint, [
    f!("LTarget", "attribute", Str),
    f!("RTarget", "value", Str),
    f!("Operand", "operator", Str),
]);

#[rustfmt::skip]
def!(AFFINITY, "affinity", 0, Affinity, [
    f!("LTarget", "attribute", Str),
    f!("RTarget", "value", Str),
    f!("Operand", "operator", Str),
    f!("Weight", "weight", Int, PTR),
]);

#[rustfmt::skip]
def!(TASK_GROUP, "group", 1, Group, [
    f!("Name", "", Label, PTR),
    f!("Count", "count", Int, PTR),
    f!("Constraints", "constraint", List(&CONSTRAINT), PTR),
    f!("Affinities", "affinity", List(&AFFINITY), PTR),
    f!("Tasks", "task", List(&TASK), PTR),
    f!("Spreads", "spread", List(&SPREAD), PTR),
    f!("Volumes", "volume", LabeledMap(&VOLUME_REQUEST), PTR),
    f!("RestartPolicy", "restart", Struct(&RESTART), PTR),
    f!("Disconnect", "disconnect", Struct(&DISCONNECT), PTR | NEW),
    f!("ReschedulePolicy", "reschedule", Struct(&RESCHEDULE), PTR),
    f!("EphemeralDisk", "ephemeral_disk", Struct(&EPHEMERAL_DISK), PTR ),
    f!("Update", "update", Struct(&UPDATE), PTR),
    f!("Migrate", "migrate", Struct(&MIGRATE), PTR),
    f!("Networks", "network", List(&NETWORK), PTR | ONE),
    f!("Meta", "meta", StrMap, PTR | ATTR),
    f!("Services", "service", List(&SERVICE), PTR),
    f!("ShutdownDelay", "shutdown_delay", Dur, PTR),
    f!("StopAfterClientDisconnect", "stop_after_client_disconnect", Dur, PTR ),
    f!("MaxClientDisconnect", "max_client_disconnect", Dur, PTR | NEW ),
    f!("MaxRunDuration", "max_run_duration", Dur, PTR | NEW),
    f!("Scaling", "scaling", Struct(&SCALING), PTR),
    f!("Consul", "consul", Struct(&CONSUL), PTR),
    f!("PreventRescheduleOnLost", "prevent_reschedule_on_lost", Bool, PTR | NEW ),
]);

#[rustfmt::skip]
def!(CONSUL, "consul", 0, None, [
    f!("Namespace", "namespace", Str),
    f!("Cluster", "cluster", Str, NEW),
    f!("Partition", "partition", Str, NEW),
]);

#[rustfmt::skip]
def!(TASK, "task", 1, Task, [
    f!("Name", "", Label),
    f!("Driver", "driver", Str),
    f!("User", "user", Str),
    f!("Lifecycle", "lifecycle", Struct(&LIFECYCLE), PTR),
    f!("Config", "config", AnyMap, PTR),
    f!("Constraints", "constraint", List(&CONSTRAINT), PTR),
    f!("Affinities", "affinity", List(&AFFINITY), PTR),
    f!("Env", "env", StrMap, PTR | ATTR),
    f!("Services", "service", List(&SERVICE), PTR),
    f!("Resources", "resources", Struct(&RESOURCES), PTR),
    f!("RestartPolicy", "restart", Struct(&RESTART), PTR),
    f!("Meta", "meta", StrMap, PTR | ATTR),
    f!("KillTimeout", "kill_timeout", Dur, PTR),
    f!("LogConfig", "logs", Struct(&LOG_CONFIG), PTR),
    f!("Artifacts", "artifact", List(&ARTIFACT), PTR),
    f!("Vault", "vault", Struct(&VAULT), PTR),
    f!("Consul", "consul", Struct(&CONSUL), PTR | NEW),
    f!("Templates", "template", List(&TEMPLATE), PTR),
    f!("DispatchPayload", "dispatch_payload", Struct(&DISPATCH_PAYLOAD), PTR ),
    f!("VolumeMounts", "volume_mount", List(&VOLUME_MOUNT), PTR),
    f!("CSIPluginConfig", "csi_plugin", Struct(&CSI_PLUGIN), PTR | OMIT ),
    f!("Leader", "leader", Bool),
    f!("ShutdownDelay", "shutdown_delay", Dur),
    f!("KillSignal", "kill_signal", Str),
    f!("Kind", "kind", Str),
    f!("ScalingPolicies", "", List(&SCALING), PTR),
    f!("Identities", "identity", List(&WORKLOAD_IDENTITY), PTR | NEW ),
    f!("Actions", "action", List(&ACTION), PTR | NEW),
    f!("Schedule", "schedule", Struct(&TASK_SCHEDULE), PTR | NEW),
    f!("Secrets", "secret", List(&SECRET), PTR | NEW),
]);

#[rustfmt::skip]
def!(LIFECYCLE, "lifecycle", 0, None, [
    f!("Hook", "hook", Str),
    f!("Sidecar", "sidecar", Bool),
]);

#[rustfmt::skip]
def!(DISPATCH_PAYLOAD, "dispatch_payload", 0, None, [
    f!("File", "file", Str),
]);

#[rustfmt::skip]
def!(LOG_CONFIG, "logs", 0, None, [
    f!("MaxFiles", "max_files", Int, PTR),
    f!("MaxFileSizeMB", "max_file_size", Int, PTR),
    f!("Enabled", "enabled", Bool, PTR | NEW),
    f!("Disabled", "disabled", Bool, PTR | NEW),
]);

#[rustfmt::skip]
def!(ARTIFACT, "artifact", 0, None, [
    f!("GetterSource", "source", Str, PTR),
    f!("GetterOptions", "options", StrMap, PTR),
    f!("GetterHeaders", "headers", StrMap, PTR),
    f!("GetterMode", "mode", Str, PTR),
    f!("GetterInsecure", "insecure", Bool, PTR | NEW),
    f!("RelativeDest", "destination", Str, PTR),
    f!("Chown", "chown", Bool, NEW),
]);

#[rustfmt::skip]
def!(TEMPLATE, "template", 0, None, [
    f!("SourcePath", "source", Str, PTR),
    f!("DestPath", "destination", Str, PTR),
    f!("EmbeddedTmpl", "data", Str, PTR),
    f!("ChangeMode", "change_mode", Str, PTR),
    f!("ChangeScript", "change_script", Struct(&CHANGE_SCRIPT), PTR | NEW ),
    f!("ChangeSignal", "change_signal", Str, PTR),
    f!("Splay", "splay", Dur, PTR),
    f!("Perms", "perms", Str, PTR),
    f!("Uid", "uid", Int, PTR | NEW),
    f!("Gid", "gid", Int, PTR | NEW),
    f!("LeftDelim", "left_delimiter", Str, PTR),
    f!("RightDelim", "right_delimiter", Str, PTR),
    f!("Envvars", "env", Bool, PTR),
    f!("VaultGrace", "vault_grace", Dur, PTR),
    f!("Wait", "wait", Struct(&WAIT_CONFIG), PTR | NEW),
    f!("ErrMissingKey", "error_on_missing_key", Bool, PTR | NEW),
]);

#[rustfmt::skip]
def!(CHANGE_SCRIPT, "change_script", 0, None, [
    f!("Command", "command", Str, PTR | REQ),
    f!("Args", "args", StrList, PTR),
    f!("Timeout", "timeout", Dur, PTR),
    f!("FailOnError", "fail_on_error", Bool, PTR | REQ),
]);

#[rustfmt::skip]
def!(WAIT_CONFIG, "wait", 0, None, [
    f!("Min", "min", Dur, PTR | REQ),
    f!("Max", "max", Dur, PTR | REQ),
]);

#[rustfmt::skip]
def!(VAULT, "vault", 0, None, [
    f!("Policies", "policies", StrList, PTR),
    f!("Role", "role", Str, NEW),
    f!("Namespace", "namespace", Str, PTR),
    f!("Cluster", "cluster", Str, NEW),
    f!("Env", "env", Bool, PTR),
    f!("DisableFile", "disable_file", Bool, PTR | NEW),
    f!("ChangeMode", "change_mode", Str, PTR),
    f!("ChangeSignal", "change_signal", Str, PTR),
    f!("AllowTokenExpiration", "allow_token_expiration", Bool, PTR | NEW ),
]);

#[rustfmt::skip]
def!(VOLUME_MOUNT, "volume_mount", 0, None, [
    f!("Volume", "volume", Str, PTR),
    f!("Destination", "destination", Str, PTR),
    f!("ReadOnly", "read_only", Bool, PTR),
    f!("PropagationMode", "propagation_mode", Str, PTR),
    f!("SELinuxLabel", "selinux_label", Str, PTR | NEW),
]);

#[rustfmt::skip]
def!(CSI_PLUGIN, "csi_plugin", 0, None, [
    f!("ID", "id", Str),
    f!("Type", "type", Str),
    f!("MountDir", "mount_dir", Str),
    f!("StagePublishBaseDir", "stage_publish_base_dir", Str, NEW),
    f!("HealthTimeout", "health_timeout", Dur, NEW),
]);

#[rustfmt::skip]
def!(RESOURCES, "resources", 0, None, [
    f!("CPU", "cpu", Int, PTR),
    f!("Cores", "cores", Int, PTR),
    f!("MemoryMB", "memory", Int, PTR),
    f!("MemoryMaxMB", "memory_max", Int, PTR),
    f!("DiskMB", "disk", Int, PTR),
    f!("Networks", "network", List(&NETWORK), PTR | ONE),
    f!("Devices", "device", List(&DEVICE), PTR),
    f!("IOPS", "iops", Int, PTR),
    f!("NUMA", "numa", Struct(&NUMA), PTR | NEW),
    f!("SecretsMB", "secrets", Int, PTR | NEW),
]);

#[rustfmt::skip]
def!(NUMA, "numa", 0, None, [
    f!("Affinity", "affinity", Str),
    f!("Devices", "devices", StrList, PTR),
]);

#[rustfmt::skip]
def!(DEVICE, "device", 1, None, [
    f!("Name", "", Label),
    f!("Count", "count", Int, PTR),
    f!("Constraints", "constraint", List(&CONSTRAINT), PTR),
    f!("Affinities", "affinity", List(&AFFINITY), PTR),
]);

#[rustfmt::skip]
def!(NETWORK, "network", 0, Network, [
    f!("Mode", "mode", Str),
    f!("Device", "device", Str),
    f!("CIDR", "cidr", Str),
    f!("IP", "ip", Str),
    f!("Hostname", "hostname", Str, NEW),
    f!("DNS", "dns", Struct(&DNS), PTR),
    f!("ReservedPorts", "reserved_ports", List(&PORT), PTR),
    f!("DynamicPorts", "port", List(&PORT), PTR),
    f!("MBits", "mbits", Int, PTR),
    f!("CNI", "cni", Struct(&CNI), PTR | NEW),
]);

#[rustfmt::skip]
def!(CNI, "cni", 0, None, [
    f!("Args", "args", StrMap, PTR | ATTR),
]);

#[rustfmt::skip]
def!(DNS, "dns", 0, None, [
    f!("Servers", "servers", StrList, PTR),
    f!("Searches", "searches", StrList, PTR),
    f!("Options", "options", StrList, PTR),
]);

#[rustfmt::skip]
def!(PORT, "port", 1, None, [
    f!("Label", "", Label),
    f!("Value", "static", Int),
    f!("To", "to", Int),
    f!("HostNetwork", "host_network", Str),
    f!("IgnoreCollision", "ignore_collision", Bool, NEW),
]);

#[rustfmt::skip]
def!(SERVICE, "service", 0, None, [
    f!("Id", "id", Str),
    f!("Name", "name", Str),
    f!("Tags", "tags", StrList, PTR),
    f!("CanaryTags", "canary_tags", StrList, PTR),
    f!("EnableTagOverride", "enable_tag_override", Bool),
    f!("PortLabel", "port", Str),
    f!("AddressMode", "address_mode", Str),
    f!("Address", "address", Str, NEW),
    f!("Checks", "check", List(&CHECK), PTR),
    f!("CheckRestart", "check_restart", Struct(&CHECK_RESTART), PTR),
    f!("Connect", "connect", Struct(&CONNECT), PTR),
    f!("Meta", "meta", StrMap, PTR),
    f!("CanaryMeta", "canary_meta", StrMap, PTR),
    f!("TaggedAddresses", "tagged_addresses", StrMap, PTR | NEW),
    f!("TaskName", "task", Str),
    f!("OnUpdate", "on_update", Str),
    f!("Identity", "identity", Struct(&WORKLOAD_IDENTITY), PTR | NEW ),
    f!("Weights", "weights", Struct(&SERVICE_WEIGHTS), PTR | NEW),
    f!("Provider", "provider", Str, NEW),
    f!("Cluster", "cluster", Str, NEW),
    f!("Kind", "kind", Str, NEW),
]);

#[rustfmt::skip]
def!(SERVICE_WEIGHTS, "weights", 0, None, [
    f!("Passing", "passing", Int),
    f!("Warning", "warning", Int),
]);

#[rustfmt::skip]
def!(CHECK, "check", 0, None, [
    f!("Id", "id", Str),
    f!("Name", "name", Str),
    f!("Type", "type", Str),
    f!("Command", "command", Str),
    f!("Args", "args", StrList, PTR),
    f!("Path", "path", Str),
    f!("Protocol", "protocol", Str),
    f!("PortLabel", "port", Str),
    f!("Expose", "expose", Bool),
    f!("AddressMode", "address_mode", Str),
    f!("Advertise", "advertise", Str, NEW),
    f!("Interval", "interval", Dur),
    f!("Timeout", "timeout", Dur),
    f!("InitialStatus", "initial_status", Str),
    f!("Notes", "notes", Str, NEW),
    f!("TLSServerName", "tls_server_name", Str, NEW),
    f!("TLSSkipVerify", "tls_skip_verify", Bool),
    f!("Header", "header", StrListMap, PTR),
    f!("Method", "method", Str),
    f!("CheckRestart", "check_restart", Struct(&CHECK_RESTART), PTR),
    f!("GRPCService", "grpc_service", Str),
    f!("GRPCUseTLS", "grpc_use_tls", Bool),
    f!("TaskName", "task", Str),
    f!("SuccessBeforePassing", "success_before_passing", Int),
    f!("FailuresBeforeCritical", "failures_before_critical", Int),
    f!("FailuresBeforeWarning", "failures_before_warning", Int, NEW),
    f!("Body", "body", Str),
    f!("OnUpdate", "on_update", Str),
]);

#[rustfmt::skip]
def!(CHECK_RESTART, "check_restart", 0, None, [
    f!("Limit", "limit", Int),
    f!("Grace", "grace", Dur, PTR),
    f!("IgnoreWarnings", "ignore_warnings", Bool),
]);

#[rustfmt::skip]
def!(CONNECT, "connect", 0, None, [
    f!("Native", "native", Bool),
    f!("Gateway", "gateway", Struct(&GATEWAY), PTR),
    f!("SidecarService", "sidecar_service", Struct(&SIDECAR_SERVICE), PTR ),
    f!("SidecarTask", "sidecar_task", Struct(&SIDECAR_TASK), PTR),
]);

#[rustfmt::skip]
def!(SIDECAR_SERVICE, "sidecar_service", 0, None, [
    f!("Tags", "tags", StrList, PTR),
    f!("Port", "port", Str),
    f!("Proxy", "proxy", Struct(&PROXY), PTR),
    f!("DisableDefaultTCPCheck", "disable_default_tcp_check", Bool),
    f!("Meta", "meta", StrMap, PTR | NEW),
]);

#[rustfmt::skip]
def!(SIDECAR_TASK, "sidecar_task", 0, None, [
    f!("Name", "name", Str),
    f!("Driver", "driver", Str),
    f!("User", "user", Str),
    f!("Config", "config", AnyMap, PTR),
    f!("Env", "env", StrMap, PTR),
    f!("Resources", "resources", Struct(&RESOURCES), PTR),
    f!("Meta", "meta", StrMap, PTR),
    f!("KillTimeout", "kill_timeout", Dur, PTR),
    f!("LogConfig", "logs", Struct(&LOG_CONFIG), PTR),
    f!("ShutdownDelay", "shutdown_delay", Dur, PTR),
    f!("KillSignal", "kill_signal", Str),
    f!("VolumeMounts", "volume_mount", List(&VOLUME_MOUNT), PTR | NEW ),
]);

#[rustfmt::skip]
def!(PROXY, "proxy", 0, None, [
    f!("LocalServiceAddress", "local_service_address", Str),
    f!("LocalServicePort", "local_service_port", Int),
    f!("ExposeConfig", "expose", Struct(&EXPOSE), PTR),
    f!("Upstreams", "upstreams", List(&UPSTREAM), PTR),
    f!("TransparentProxy", "transparent_proxy", Struct(&TRANSPARENT_PROXY), PTR | NEW ),
    f!("Config", "config", AnyMap, PTR),
]);

#[rustfmt::skip]
def!(EXPOSE, "expose", 0, None, [
    f!("Path", "path", List(&EXPOSE_PATH), PTR),
]);

#[rustfmt::skip]
def!(EXPOSE_PATH, "path", 0, None, [
    f!("Path", "path", Str),
    f!("Protocol", "protocol", Str),
    f!("LocalPathPort", "local_path_port", Int),
    f!("ListenerPort", "listener_port", Str),
]);

#[rustfmt::skip]
def!(UPSTREAM, "upstreams", 0, None, [
    f!("DestinationName", "destination_name", Str),
    f!("DestinationNamespace", "destination_namespace", Str, NEW),
    f!("DestinationPeer", "destination_peer", Str, NEW),
    f!("DestinationPartition", "destination_partition", Str, NEW),
    f!("DestinationType", "destination_type", Str, NEW),
    f!("LocalBindPort", "local_bind_port", Int),
    f!("Datacenter", "datacenter", Str),
    f!("LocalBindAddress", "local_bind_address", Str),
    f!("LocalBindSocketPath", "local_bind_socket_path", Str, NEW),
    f!("LocalBindSocketMode", "local_bind_socket_mode", Str, NEW),
    f!("MeshGateway", "mesh_gateway", Struct(&MESH_GATEWAY), PTR),
    f!("Config", "config", AnyMap, PTR | NEW),
]);

#[rustfmt::skip]
def!(MESH_GATEWAY, "mesh_gateway", 0, None, [
    f!("Mode", "mode", Str),
]);

#[rustfmt::skip]
def!(TRANSPARENT_PROXY, "transparent_proxy", 0, None, [
    f!("UID", "uid", Str),
    f!("OutboundPort", "outbound_port", Int),
    f!("ExcludeInboundPorts", "exclude_inbound_ports", StrList, PTR),
    f!("ExcludeOutboundPorts", "exclude_outbound_ports", IntList, PTR ),
    f!("ExcludeOutboundCIDRs", "exclude_outbound_cidrs", StrList, PTR ),
    f!("ExcludeUIDs", "exclude_uids", StrList, PTR),
    f!("NoDNS", "no_dns", Bool),
]);

#[rustfmt::skip]
def!(GATEWAY, "gateway", 0, None, [
    f!("Proxy", "proxy", Struct(&GATEWAY_PROXY), PTR),
    f!("Ingress", "ingress", Struct(&INGRESS), PTR),
    f!("Terminating", "terminating", Struct(&TERMINATING), PTR),
    f!("Mesh", "mesh", Struct(&MESH), PTR),
]);

#[rustfmt::skip]
def!(MESH, "mesh", 0, None, []);

#[rustfmt::skip]
def!(GATEWAY_PROXY, "proxy", 0, None, [
    f!("ConnectTimeout", "connect_timeout", Dur, PTR),
    f!("EnvoyGatewayBindTaggedAddresses", "envoy_gateway_bind_tagged_addresses", Bool ),
    f!("EnvoyGatewayBindAddresses", "envoy_gateway_bind_addresses", LabeledMap(&BIND_ADDRESS), PTR ),
    f!("EnvoyGatewayNoDefaultBind", "envoy_gateway_no_default_bind", Bool ),
    f!("EnvoyDNSDiscoveryType", "envoy_dns_discovery_type", Str),
    f!("Config", "config", AnyMap, PTR),
]);

#[rustfmt::skip]
def!(BIND_ADDRESS, "envoy_gateway_bind_addresses", 1, None, [
    f!("Name", "", Label),
    f!("Address", "address", Str),
    f!("Port", "port", Int),
]);

#[rustfmt::skip]
def!(INGRESS, "ingress", 0, None, [
    f!("TLS", "tls", Struct(&GATEWAY_TLS), PTR),
    f!("Listeners", "listener", List(&INGRESS_LISTENER), PTR),
]);

#[rustfmt::skip]
def!(GATEWAY_TLS, "tls", 0, None, [
    f!("Enabled", "enabled", Bool),
    f!("TLSMinVersion", "tls_min_version", Str, NEW),
    f!("TLSMaxVersion", "tls_max_version", Str, NEW),
    f!("CipherSuites", "cipher_suites", StrList, PTR | NEW),
    f!("SDS", "sds", Struct(&GATEWAY_SDS), PTR | NEW),
]);

#[rustfmt::skip]
def!(GATEWAY_SDS, "sds", 0, None, [
    f!("ClusterName", "cluster_name", Str),
    f!("CertResource", "cert_resource", Str),
]);

#[rustfmt::skip]
def!(INGRESS_LISTENER, "listener", 0, None, [
    f!("Port", "port", Int),
    f!("Protocol", "protocol", Str),
    f!("Services", "service", List(&INGRESS_SERVICE), PTR),
]);

#[rustfmt::skip]
def!(INGRESS_SERVICE, "service", 0, None, [
    f!("Name", "name", Str),
    f!("Hosts", "hosts", StrList, PTR),
    f!("TLS", "tls", Struct(&GATEWAY_TLS), PTR | NEW),
    f!("RequestHeaders", "request_headers", Struct(&HEADER_MODIFIERS), PTR | NEW ),
    f!("ResponseHeaders", "response_headers", Struct(&HEADER_MODIFIERS), PTR | NEW ),
    f!("MaxConnections", "max_connections", Int, PTR | NEW),
    f!("MaxPendingRequests", "max_pending_requests", Int, PTR | NEW),
    f!("MaxConcurrentRequests", "max_concurrent_requests", Int, PTR | NEW ),
]);

#[rustfmt::skip]
def!(HEADER_MODIFIERS, "request_headers", 0, None, [
    f!("Add", "add", StrMap, PTR),
    f!("Set", "set", StrMap, PTR),
    f!("Remove", "remove", StrList, PTR),
]);

#[rustfmt::skip]
def!(TERMINATING, "terminating", 0, None, [
    f!("Services", "service", List(&LINKED_SERVICE), PTR),
]);

#[rustfmt::skip]
def!(LINKED_SERVICE, "service", 0, None, [
    f!("Name", "name", Str),
    f!("CAFile", "ca_file", Str),
    f!("CertFile", "cert_file", Str),
    f!("KeyFile", "key_file", Str),
    f!("SNI", "sni", Str),
]);

#[rustfmt::skip]
def!(UPDATE, "update", 0, None, [
    f!("Stagger", "stagger", Dur, PTR),
    f!("MaxParallel", "max_parallel", Int, PTR),
    f!("HealthCheck", "health_check", Str, PTR),
    f!("MinHealthyTime", "min_healthy_time", Dur, PTR),
    f!("HealthyDeadline", "healthy_deadline", Dur, PTR),
    f!("ProgressDeadline", "progress_deadline", Dur, PTR),
    f!("Canary", "canary", Int, PTR),
    f!("AutoRevert", "auto_revert", Bool, PTR),
    f!("AutoPromote", "auto_promote", Bool, PTR),
]);

#[rustfmt::skip]
def!(MIGRATE, "migrate", 0, None, [
    f!("MaxParallel", "max_parallel", Int, PTR),
    f!("HealthCheck", "health_check", Str, PTR),
    f!("MinHealthyTime", "min_healthy_time", Dur, PTR),
    f!("HealthyDeadline", "healthy_deadline", Dur, PTR),
]);

#[rustfmt::skip]
def!(RESCHEDULE, "reschedule", 0, None, [
    f!("Attempts", "attempts", Int, PTR),
    f!("Interval", "interval", Dur, PTR),
    f!("Delay", "delay", Dur, PTR),
    f!("DelayFunction", "delay_function", Str, PTR),
    f!("MaxDelay", "max_delay", Dur, PTR),
    f!("Unlimited", "unlimited", Bool, PTR),
]);

#[rustfmt::skip]
def!(RESTART, "restart", 0, None, [
    f!("Interval", "interval", Dur, PTR),
    f!("Attempts", "attempts", Int, PTR),
    f!("Delay", "delay", Dur, PTR),
    f!("Mode", "mode", Str, PTR),
    f!("RenderTemplates", "render_templates", Bool, PTR | NEW),
]);

#[rustfmt::skip]
def!(DISCONNECT, "disconnect", 0, None, [
    f!("LostAfter", "lost_after", Dur, PTR),
    f!("StopOnClientAfter", "stop_on_client_after", Dur, PTR),
    f!("Replace", "replace", Bool, PTR),
    f!("Reconcile", "reconcile", Str, PTR),
]);

#[rustfmt::skip]
def!(EPHEMERAL_DISK, "ephemeral_disk", 0, None, [
    f!("Sticky", "sticky", Bool, PTR),
    f!("Migrate", "migrate", Bool, PTR),
    f!("SizeMB", "size", Int, PTR),
]);

#[rustfmt::skip]
def!(SPREAD, "spread", 0, None, [
    f!("Attribute", "attribute", Str),
    f!("Weight", "weight", Int, PTR),
    f!("SpreadTarget", "target", List(&SPREAD_TARGET), PTR),
]);

#[rustfmt::skip]
def!(SPREAD_TARGET, "target", 1, None, [
    f!("Value", "", Label),
    f!("Percent", "percent", Int),
]);

#[rustfmt::skip]
def!(MULTIREGION, "multiregion", 0, None, [
    f!("Strategy", "strategy", Struct(&MULTIREGION_STRATEGY), PTR),
    f!("Regions", "region", List(&MULTIREGION_REGION), PTR),
]);

#[rustfmt::skip]
def!(MULTIREGION_STRATEGY, "strategy", 0, None, [
    f!("MaxParallel", "max_parallel", Int, PTR),
    f!("OnFailure", "on_failure", Str, PTR),
]);

#[rustfmt::skip]
def!(MULTIREGION_REGION, "region", 1, None, [
    f!("Name", "", Label),
    f!("Count", "count", Int, PTR),
    f!("Datacenters", "datacenters", StrList, PTR),
    f!("NodePool", "node_pool", Str, NEW),
    f!("Meta", "meta", StrMap, PTR),
]);

#[rustfmt::skip]
def!(PERIODIC, "periodic", 0, Periodic, [
    f!("Enabled", "enabled", Bool, PTR),
    f!("Spec", "cron", Str, PTR),
    f!("Specs", "crons", StrList, PTR | NEW),
    f!("SpecType", "", Str, PTR),
    f!("ProhibitOverlap", "prohibit_overlap", Bool, PTR),
    f!("TimeZone", "time_zone", Str, PTR),
]);

#[rustfmt::skip]
def!(PARAMETERIZED, "parameterized", 0, None, [
    f!("Payload", "payload", Str),
    f!("MetaRequired", "meta_required", StrList, PTR),
    f!("MetaOptional", "meta_optional", StrList, PTR),
]);

#[rustfmt::skip]
def!(SCALING, "scaling", 0, None, [
    f!("Min", "min", Int, PTR),
    f!("Max", "max", Int, PTR),
    f!("Policy", "policy", AnyMap, PTR),
    f!("Enabled", "enabled", Bool, PTR),
    f!("Type", "type", Str),
    f!("ID", "", Str),
    f!("Namespace", "", Str),
    f!("Target", "", StrMap, PTR),
    f!("CreateIndex", "", Int),
    f!("ModifyIndex", "", Int),
]);

#[rustfmt::skip]
def!(VOLUME_REQUEST, "volume", 1, None, [
    f!("Name", "", Label),
    f!("Type", "type", Str),
    f!("Source", "source", Str),
    f!("ReadOnly", "read_only", Bool),
    f!("Sticky", "sticky", Bool, NEW),
    f!("AccessMode", "access_mode", Str),
    f!("AttachmentMode", "attachment_mode", Str),
    f!("MountOptions", "mount_options", Struct(&CSI_MOUNT_OPTIONS), PTR ),
    f!("PerAlloc", "per_alloc", Bool),
]);

#[rustfmt::skip]
def!(CSI_MOUNT_OPTIONS, "mount_options", 0, None, [
    f!("FSType", "fs_type", Str),
    f!("MountFlags", "mount_flags", StrList, PTR),
]);

#[rustfmt::skip]
def!(WORKLOAD_IDENTITY, "identity", 0, None, [
    f!("Name", "name", Str),
    f!("Audience", "aud", StrList, PTR),
    f!("ChangeMode", "change_mode", Str),
    f!("ChangeSignal", "change_signal", Str),
    f!("Env", "env", Bool),
    f!("File", "file", Bool),
    f!("Filepath", "filepath", Str),
    f!("ServiceName", "", Str),
    f!("TTL", "ttl", Dur),
]);

#[rustfmt::skip]
def!(ACTION, "action", 1, None, [
    f!("Name", "", Label),
    f!("Command", "command", Str),
    f!("Args", "args", StrList, PTR),
]);

#[rustfmt::skip]
def!(TASK_SCHEDULE, "schedule", 0, None, [
    f!("Cron", "cron", Struct(&TASK_SCHEDULE_CRON), PTR),
]);

#[rustfmt::skip]
def!(TASK_SCHEDULE_CRON, "cron", 0, None, [
    f!("Start", "start", Str),
    f!("End", "end", Str),
    f!("Timezone", "timezone", Str),
]);

#[rustfmt::skip]
def!(SECRET, "secret", 1, None, [
    f!("Name", "", Label),
    f!("Provider", "provider", Str),
    f!("Path", "path", Str),
    f!("Config", "config", AnyMap, PTR),
    f!("Env", "env", StrMap, PTR),
]);
