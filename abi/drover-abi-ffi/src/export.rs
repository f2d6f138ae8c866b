//! The export macro: what turns a crate with one `drover_abi::Driver` into a loadable plugin.

/// Exports the plugin root module of a cdylib whose driver is built by `$make` (a function or
/// closure taking nothing and returning a type that implements `drover_abi::Driver`).
///
/// Expands to the `LibHeader` static abi_stable looks up in a library (written out here rather
/// than through `#[export_root_module]`, whose expansion needs `abi_stable` as a direct
/// dependency of the plugin and predates edition 2024's `unsafe(no_mangle)`). Use it once per
/// library; plugin authors normally call `drover_plugin_sdk::export_driver!`.
#[macro_export]
macro_rules! export_driver_plugin {
    ($make:expr) => {
        #[doc(hidden)]
        extern "C" fn __drover_new_driver() -> $crate::__private::abi_stable::std_types::RResult<
            $crate::DriverFfiBox,
            $crate::__private::abi_stable::std_types::RString,
        > {
            $crate::plugin::new_driver_box(|| ($make)())
        }

        #[doc(hidden)]
        fn __drover_root_module() -> $crate::DriverPluginRef {
            $crate::plugin::root_module(__drover_new_driver)
        }

        #[doc(hidden)]
        extern "C" fn __drover_erased_root_module()
        -> $crate::__private::abi_stable::library::RootModuleResult {
            $crate::__private::abi_stable::library::__call_root_module_loader(__drover_root_module)
        }

        /// The symbol abi_stable's loader reads (`ROOT_MODULE_LOADER_NAME`).
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        #[unsafe(no_mangle)]
        pub static _1as_0lib_1header_0root_bmodule_bloader:
            $crate::__private::abi_stable::library::LibHeader = {
            // SAFETY: the constructor returns the module of exactly `DriverPluginRef`, as
            // `from_constructor` requires: `__call_root_module_loader` erases that very type.
            unsafe {
                $crate::__private::abi_stable::library::LibHeader::from_constructor::<
                    $crate::DriverPluginRef,
                >(
                    __drover_erased_root_module,
                    $crate::__private::abi_stable::library::CheckTypeLayout::Yes,
                )
            }
        };
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn exported_symbol_is_the_one_abi_stable_looks_up() {
        assert_eq!(
            abi_stable::library::ROOT_MODULE_LOADER_NAME,
            "_1as_0lib_1header_0root_bmodule_bloader"
        );
    }
}
