//! The stable ABI of in-process driver plugins: an abi_stable root module ([`DriverPlugin`]) that a
//! cdylib exports, the `#[sabi_trait]` driver interface ([`DriverFfi`]) it hands out, the
//! plugin-side shims that wrap any `drover_abi::Driver` into it (catching panics), the export macro,
//! and the host-side loader and adapter that turn a library back into an `Arc<dyn Driver>`.
//!
//! Every structured value crosses the boundary as a JSON string of a `drover_abi` type, so the ABI
//! surface is a handful of functions over `RStr`/`RString` and never changes when a field is added
//! to the contract's data.
//!
//! Growth rules (see `interface.rs`): the root module is a prefix type; new module-level functions
//! are added after `#[sabi(last_prefix_field)]` and are optional to the host, which is how a newer
//! host loads an older plugin. New driver methods are not added to the `#[sabi_trait]` (its vtable
//! does not grow compatibly); they go through [`DriverFfi::call`], which older plugins answer with
//! "not supported".
//!
//! Must not depend on: tokio, tonic, or any Drover crate other than drover-abi.

pub mod exec;
mod export;
mod history;
pub mod host;
// sabi_trait 0.11 expands to impls inside a generated const, which this lint flags.
#[allow(non_local_definitions)]
mod interface;
pub mod plugin;
pub mod wire;

pub use interface::{
    ABI_VERSION, DriverFfi, DriverFfi_TO, DriverFfiBox, DriverPlugin, DriverPluginRef, HostLogger,
    LogLevel,
};
pub use wire::{WireError, decode_error, encode_error};

/// The FFI string types the interface uses, for code that implements a `HostLogger`.
pub use abi_stable::std_types::{RStr, RString};

/// What the export macro expands to refers to these; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use abi_stable;
}
