//! Process supervision shared by the raw_exec and exec drivers: task `config` parsing, FIFO log
//! wiring, user switching, /proc reading, the exit watcher (one polling thread for all tasks) and the stdio relay of
//! interactive execs.
//!
//! The exec driver compiles these same files through a `#[path]` module because drivers may not
//! depend on each other; everything here depends only on drover-abi, nix, libc and std.

pub mod exec_stream;
pub mod exit_poller;
pub mod fifo;
pub mod netns;
pub mod procfs;
pub mod task_config;
pub mod task_state;
pub mod time;
pub mod user;
pub mod watch;

#[cfg(test)]
pub mod testutil;
