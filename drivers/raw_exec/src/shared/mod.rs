//! Process supervision shared by the raw_exec and exec drivers: task `config` parsing, FIFO log
//! wiring, user switching, /proc reading and the per-task exit watcher.
//!
//! The exec driver compiles these same files through a `#[path]` module because drivers may not
//! depend on each other; everything here depends only on drover-abi, nix, libc and std.

pub mod fifo;
pub mod procfs;
pub mod task_config;
pub mod task_state;
pub mod time;
pub mod user;
pub mod watch;

#[cfg(test)]
pub mod testutil;
