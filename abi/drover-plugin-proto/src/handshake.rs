//! go-plugin's start-up handshake, as Nomad configures it.
//!
//! The agent starts the plugin executable with the magic cookie and the port and protocol
//! settings in its environment. The plugin answers with one line on its standard output,
//! `CORE|APP|NETWORK|ADDRESS|PROTOCOL|SERVER_CERT` (for example `1|2|unix|/tmp/plugin1|grpc|`),
//! and then serves gRPC on that address.

use std::fmt;

/// The environment variable holding the magic cookie (Nomad's `base.Handshake`).
pub const MAGIC_COOKIE_KEY: &str = "NOMAD_PLUGIN_MAGIC_COOKIE";
/// The magic cookie's value: a plugin started without it is being run by hand.
pub const MAGIC_COOKIE_VALUE: &str =
    "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255";
/// go-plugin's own protocol version.
pub const CORE_PROTOCOL_VERSION: u32 = 1;
/// Nomad's plugin protocol version (`base.Handshake.ProtocolVersion`).
pub const APP_PROTOCOL_VERSION: u32 = 2;

/// Lowest TCP port a plugin may listen on (where it uses TCP at all).
pub const ENV_MIN_PORT: &str = "PLUGIN_MIN_PORT";
pub const ENV_MAX_PORT: &str = "PLUGIN_MAX_PORT";
/// Comma-separated app protocol versions the host speaks.
pub const ENV_PROTOCOL_VERSIONS: &str = "PLUGIN_PROTOCOL_VERSIONS";
/// Where the plugin creates its unix socket, when the host chooses.
pub const ENV_UNIX_SOCKET_DIR: &str = "PLUGIN_UNIX_SOCKET_DIR";
/// Set by hosts that use go-plugin's automatic mutual TLS; Drover's agent never does.
pub const ENV_CLIENT_CERT: &str = "PLUGIN_CLIENT_CERT";
/// go-plugin's default port range.
pub const DEFAULT_MIN_PORT: u16 = 10_000;
pub const DEFAULT_MAX_PORT: u16 = 25_000;

/// What go-plugin prints when a plugin binary is run by hand.
pub const RUN_BY_HAND_MESSAGE: &str = "This binary is a plugin. These are not meant to be executed directly.\n\
Please execute the program that consumes these plugins, which will\n\
load any plugins automatically\n";

/// The environment the host sets for a plugin, as go-plugin's client does.
pub fn plugin_env() -> Vec<(&'static str, String)> {
    vec![
        (MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE.to_string()),
        (ENV_MIN_PORT, DEFAULT_MIN_PORT.to_string()),
        (ENV_MAX_PORT, DEFAULT_MAX_PORT.to_string()),
        (ENV_PROTOCOL_VERSIONS, APP_PROTOCOL_VERSION.to_string()),
    ]
}

/// The parsed handshake line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    pub core_version: u32,
    pub app_version: u32,
    /// `unix` or `tcp`.
    pub network: String,
    pub address: String,
    /// `grpc` or `netrpc`.
    pub protocol: String,
    /// Base64 DER certificate when the plugin serves TLS; empty otherwise.
    pub server_cert: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error(
        "unrecognized remote plugin message: {0:?} (this usually means the file is not a Nomad plugin, or the plugin printed something before its handshake line)"
    )]
    Unrecognized(String),
    #[error("plugin speaks go-plugin core protocol {0}, the agent speaks {CORE_PROTOCOL_VERSION}")]
    CoreVersion(u32),
    #[error(
        "plugin speaks Nomad plugin protocol {0}, the agent speaks {APP_PROTOCOL_VERSION}: it was built for another Nomad version"
    )]
    AppVersion(u32),
    #[error("plugin speaks {0:?}; only gRPC plugins are supported")]
    Protocol(String),
    #[error("plugin listens on a {0:?} address; only unix and tcp are supported")]
    Network(String),
    #[error("plugin serves TLS, which the agent did not ask for")]
    Tls,
}

impl Handshake {
    /// The handshake a Drover sidecar prints for a unix socket at `path`.
    pub fn unix(path: &str) -> Handshake {
        Handshake {
            core_version: CORE_PROTOCOL_VERSION,
            app_version: APP_PROTOCOL_VERSION,
            network: "unix".into(),
            address: path.into(),
            protocol: "grpc".into(),
            server_cert: String::new(),
        }
    }

    /// Parses a line as go-plugin's client does: at least four `|`-separated fields, the
    /// protocol defaulting to `netrpc` when absent.
    pub fn parse(line: &str) -> Result<Handshake, HandshakeError> {
        let line = line.trim_end_matches(['\r', '\n']);
        let unrecognized = || HandshakeError::Unrecognized(line.to_string());
        let parts: Vec<&str> = line.splitn(7, '|').collect();
        if parts.len() < 4 {
            return Err(unrecognized());
        }
        let number = |s: &str| s.trim().parse::<u32>().map_err(|_| unrecognized());
        Ok(Handshake {
            core_version: number(parts[0])?,
            app_version: number(parts[1])?,
            network: parts[2].to_string(),
            address: parts[3].to_string(),
            protocol: parts.get(4).unwrap_or(&"netrpc").to_string(),
            server_cert: parts.get(5).unwrap_or(&"").to_string(),
        })
    }

    /// Checks that the agent can talk to this plugin: the versions, gRPC, a unix or tcp
    /// address, no TLS.
    pub fn check(&self) -> Result<(), HandshakeError> {
        if self.core_version != CORE_PROTOCOL_VERSION {
            return Err(HandshakeError::CoreVersion(self.core_version));
        }
        if self.app_version != APP_PROTOCOL_VERSION {
            return Err(HandshakeError::AppVersion(self.app_version));
        }
        if self.protocol != "grpc" {
            return Err(HandshakeError::Protocol(self.protocol.clone()));
        }
        if self.network != "unix" && self.network != "tcp" {
            return Err(HandshakeError::Network(self.network.clone()));
        }
        if !self.server_cert.is_empty() {
            return Err(HandshakeError::Tls);
        }
        Ok(())
    }
}

impl fmt::Display for Handshake {
    /// The line a plugin prints (without its newline).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}|{}|{}|{}|{}|{}",
            self.core_version,
            self.app_version,
            self.network,
            self.address,
            self.protocol,
            self.server_cert
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sidecar_line_is_nomads_format_and_parses_back() {
        let h = Handshake::unix("/tmp/plugin123");
        assert_eq!(h.to_string(), "1|2|unix|/tmp/plugin123|grpc|");
        let parsed = Handshake::parse("1|2|unix|/tmp/plugin123|grpc|\n").unwrap();
        assert_eq!(parsed, h);
        parsed.check().unwrap();
    }

    #[test]
    fn newer_go_plugin_lines_with_a_multiplex_field_parse() {
        let h = Handshake::parse("1|2|unix|/tmp/p|grpc||true").unwrap();
        assert_eq!(h.server_cert, "");
        h.check().unwrap();
    }

    #[test]
    fn wrong_versions_protocols_and_garbage_are_refused_with_reasons() {
        assert!(matches!(
            Handshake::parse("hello world"),
            Err(HandshakeError::Unrecognized(_))
        ));
        assert!(matches!(
            Handshake::parse("x|2|unix|/p|grpc|"),
            Err(HandshakeError::Unrecognized(_))
        ));
        let check = |line: &str| Handshake::parse(line).unwrap().check().unwrap_err();
        assert_eq!(check("2|2|unix|/p|grpc|"), HandshakeError::CoreVersion(2));
        assert_eq!(check("1|1|unix|/p|grpc|"), HandshakeError::AppVersion(1));
        assert_eq!(
            check("1|2|unix|/p"),
            HandshakeError::Protocol("netrpc".into())
        );
        assert_eq!(
            check("1|2|udp|/p|grpc|"),
            HandshakeError::Network("udp".into())
        );
        assert_eq!(check("1|2|unix|/p|grpc|MIIB"), HandshakeError::Tls);
    }

    #[test]
    fn the_plugin_environment_carries_the_cookie_and_versions() {
        let env = plugin_env();
        assert!(env.contains(&(MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE.to_string())));
        assert!(env.contains(&(ENV_PROTOCOL_VERSIONS, "2".to_string())));
        assert!(env.contains(&(ENV_MIN_PORT, "10000".to_string())));
        assert!(env.contains(&(ENV_MAX_PORT, "25000".to_string())));
    }
}
