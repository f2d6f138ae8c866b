//! The root module layouts of every earlier ABI version, frozen, so the host can check an older
//! plugin against the exact layout it was built with.
//!
//! abi_stable's layout check lets a library's prefix type have more fields than the host's (an
//! older host loads a newer plugin) but refuses one with fewer ("too many fields"), so a newer
//! host cannot check an older plugin against its own, longer `DriverPlugin`. Checked against the
//! older layout instead, the module is then used through the current type: its prefix is the
//! same, and accessors of later fields read the library's own field table and return `None`.
//!
//! When the root module gains a field, copy the previous `DriverPlugin` here as a new module and
//! add it to `host::load_library`'s fallbacks. Type and field names must stay those of the
//! original (abi_stable compares them).

/// ABI 1.0.0: `new_driver` only. Read only through its layout and the current type's accessors.
#[allow(non_local_definitions, dead_code)]
pub mod v1_0 {
    use abi_stable::library::RootModule;
    use abi_stable::sabi_types::VersionStrings;
    use abi_stable::std_types::{RResult, RString};
    use abi_stable::{StableAbi, declare_root_module_statics};

    use crate::interface::DriverFfiBox;

    #[repr(C)]
    #[derive(StableAbi)]
    #[sabi(kind(Prefix(prefix_ref = DriverPluginRef)))]
    #[sabi(missing_field(option))]
    pub struct DriverPlugin {
        #[sabi(last_prefix_field)]
        pub new_driver: extern "C" fn() -> RResult<DriverFfiBox, RString>,
    }

    impl RootModule for DriverPluginRef {
        declare_root_module_statics! {DriverPluginRef}
        const BASE_NAME: &'static str = "drover_driver_plugin";
        const NAME: &'static str = "drover_driver_plugin";
        const VERSION_STRINGS: VersionStrings = VersionStrings::new("1.0.0");
    }
}
