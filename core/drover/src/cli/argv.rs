//! Nomad's flag package takes long flags with one dash (`-detach`, `-address=...`); clap wants
//! two. Rewriting argv before clap sees it lets Nomad muscle memory and scripts work unchanged.

use std::collections::BTreeSet;
use std::ffi::OsString;

/// Every long flag name (and alias) anywhere in the command tree, plus clap's `help`.
pub fn known_long_flags(cmd: &clap::Command) -> BTreeSet<String> {
    let mut names = BTreeSet::from(["help".to_string()]);
    collect(cmd, &mut names);
    names
}

fn collect(cmd: &clap::Command, names: &mut BTreeSet<String>) {
    for arg in cmd.get_arguments() {
        if let Some(long) = arg.get_long() {
            names.insert(long.to_string());
        }
        for alias in arg.get_all_aliases().into_iter().flatten() {
            names.insert(alias.to_string());
        }
    }
    for sub in cmd.get_subcommands() {
        collect(sub, names);
    }
}

/// Rewrites `-name` / `-name=value` to `--name` / `--name=value` when `name` (two or more
/// characters) is a known long flag. Short flags (`-f`, `-n5`), negative numbers, `-` (stdin)
/// and everything after `--` pass through untouched.
pub fn rewrite_single_dash_flags(args: Vec<OsString>, known: &BTreeSet<String>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut passthrough = false;
    let remote_command = exec_command_start(&args);
    for (i, arg) in args.into_iter().enumerate() {
        // argv[0] is the program name; the command `alloc exec` runs keeps its own flags.
        if i == 0 || passthrough || remote_command.is_some_and(|start| i >= start) {
            out.push(arg);
            continue;
        }
        let Some(text) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if text == "--" {
            passthrough = true;
            out.push(arg);
            continue;
        }
        let rewritten = text
            .strip_prefix('-')
            .filter(|rest| !rest.starts_with('-'))
            .and_then(|rest| {
                let name = rest.split_once('=').map_or(rest, |(name, _)| name);
                (name.chars().count() >= 2 && known.contains(name)).then(|| format!("--{rest}"))
            });
        out.push(rewritten.map_or(arg, OsString::from));
    }
    out
}

/// Flags of `alloc exec` (and the connection's) that take the next argument as their value.
const EXEC_VALUE_FLAGS: [&str; 6] = ["task", "e", "address", "region", "namespace", "token"];

/// Where the command of `alloc exec ALLOC CMD...` (or `exec ...`) starts: Nomad's flag parsing
/// stops at the first argument that is not a flag, so what follows the allocation is the
/// command's own, flags included.
fn exec_command_start(args: &[OsString]) -> Option<usize> {
    let words: Vec<Option<&str>> = args.iter().map(|a| a.to_str()).collect();
    let after = match words.get(1..3) {
        Some([Some("alloc"), Some("exec")]) => 3,
        _ if words.get(1) == Some(&Some("exec")) => 2,
        _ => return None,
    };
    let mut positionals = 0;
    let mut i = after;
    while i < words.len() {
        let word = words[i]?;
        if word == "--" {
            return None;
        }
        match word.strip_prefix('-').map(|w| w.trim_start_matches('-')) {
            Some(flag) if !flag.is_empty() => {
                if !flag.contains('=') && EXEC_VALUE_FLAGS.contains(&flag) {
                    i += 1;
                }
            }
            _ => {
                positionals += 1;
                if positionals == 2 {
                    return Some(i);
                }
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> BTreeSet<String> {
        [
            "detach", "purge", "address", "var", "verbose", "tail", "stderr", "dev",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn rewrite(args: &[&str]) -> Vec<String> {
        let args = args.iter().map(OsString::from).collect();
        rewrite_single_dash_flags(args, &known())
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn single_dash_long_flags_become_double_dash() {
        assert_eq!(
            rewrite(&[
                "drover",
                "job",
                "run",
                "-detach",
                "-var",
                "a=1",
                "job.nomad"
            ]),
            [
                "drover",
                "job",
                "run",
                "--detach",
                "--var",
                "a=1",
                "job.nomad"
            ]
        );
    }

    #[test]
    fn flag_values_after_equals_are_kept() {
        assert_eq!(
            rewrite(&["drover", "status", "-address=http://h:4646", "-var=k=v"]),
            ["drover", "status", "--address=http://h:4646", "--var=k=v"]
        );
    }

    #[test]
    fn short_flags_unknown_names_and_numbers_are_untouched() {
        assert_eq!(
            rewrite(&[
                "drover", "alloc", "logs", "-f", "-n", "5", "-n5", "-bogus", "-1", "-", "--tail"
            ]),
            [
                "drover", "alloc", "logs", "-f", "-n", "5", "-n5", "-bogus", "-1", "-", "--tail"
            ]
        );
    }

    #[test]
    fn arguments_after_double_dash_are_untouched() {
        assert_eq!(
            rewrite(&["drover", "job", "run", "--", "-detach"]),
            ["drover", "job", "run", "--", "-detach"]
        );
    }

    #[test]
    fn program_name_is_never_rewritten() {
        assert_eq!(rewrite(&["-dev", "-dev"]), ["-dev", "--dev"]);
    }
}
