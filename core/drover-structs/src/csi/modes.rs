//! The enumerations of CSI: how a volume is accessed and attached, what a claim asks for and
//! where its release stands, and which CSI services a plugin task runs. Strings where Nomad
//! writes strings, numbers where Nomad writes Go `iota` values.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How many nodes and writers a volume allows (CSI's access modes).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum CsiAccessMode {
    /// Not chosen yet: a registered volume takes the mode of its first claim.
    #[default]
    #[serde(rename = "")]
    Unknown,
    #[serde(rename = "single-node-reader-only")]
    SingleNodeReader,
    #[serde(rename = "single-node-writer")]
    SingleNodeWriter,
    #[serde(rename = "multi-node-reader-only")]
    MultiNodeReader,
    #[serde(rename = "multi-node-single-writer")]
    MultiNodeSingleWriter,
    #[serde(rename = "multi-node-multi-writer")]
    MultiNodeMultiWriter,
}

impl CsiAccessMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CsiAccessMode::Unknown => "",
            CsiAccessMode::SingleNodeReader => "single-node-reader-only",
            CsiAccessMode::SingleNodeWriter => "single-node-writer",
            CsiAccessMode::MultiNodeReader => "multi-node-reader-only",
            CsiAccessMode::MultiNodeSingleWriter => "multi-node-single-writer",
            CsiAccessMode::MultiNodeMultiWriter => "multi-node-multi-writer",
        }
    }

    /// Parses Nomad's text for a mode; `None` for anything else.
    pub fn parse(s: &str) -> Option<CsiAccessMode> {
        [
            CsiAccessMode::Unknown,
            CsiAccessMode::SingleNodeReader,
            CsiAccessMode::SingleNodeWriter,
            CsiAccessMode::MultiNodeReader,
            CsiAccessMode::MultiNodeSingleWriter,
            CsiAccessMode::MultiNodeMultiWriter,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }

    /// Modes that let an allocation write.
    pub fn is_writable(self) -> bool {
        matches!(
            self,
            CsiAccessMode::SingleNodeWriter
                | CsiAccessMode::MultiNodeSingleWriter
                | CsiAccessMode::MultiNodeMultiWriter
        )
    }
}

impl fmt::Display for CsiAccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether the volume reaches the task as a file system or a raw block device.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum CsiAttachmentMode {
    #[default]
    #[serde(rename = "")]
    Unknown,
    #[serde(rename = "block-device")]
    BlockDevice,
    #[serde(rename = "file-system")]
    FileSystem,
}

impl CsiAttachmentMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CsiAttachmentMode::Unknown => "",
            CsiAttachmentMode::BlockDevice => "block-device",
            CsiAttachmentMode::FileSystem => "file-system",
        }
    }

    /// Parses Nomad's text for a mode; `None` for anything else.
    pub fn parse(s: &str) -> Option<CsiAttachmentMode> {
        [
            CsiAttachmentMode::Unknown,
            CsiAttachmentMode::BlockDevice,
            CsiAttachmentMode::FileSystem,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }
}

impl fmt::Display for CsiAttachmentMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a claim asks for. Nomad writes the Go constant's number: 0 read, 1 write, 2 release
/// (a claim the servers make to release what a node holds, without an allocation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum CsiClaimMode {
    #[default]
    Read,
    Write,
    Release,
}

impl From<CsiClaimMode> for u8 {
    fn from(m: CsiClaimMode) -> u8 {
        match m {
            CsiClaimMode::Read => 0,
            CsiClaimMode::Write => 1,
            CsiClaimMode::Release => 2,
        }
    }
}

impl TryFrom<u8> for CsiClaimMode {
    type Error = String;
    fn try_from(v: u8) -> Result<Self, String> {
        match v {
            0 => Ok(CsiClaimMode::Read),
            1 => Ok(CsiClaimMode::Write),
            2 => Ok(CsiClaimMode::Release),
            other => Err(format!("unknown volume claim mode {other}")),
        }
    }
}

/// Where a claim stands on its way from taken to freed. The numbers are Nomad's (Go `iota`
/// order, with `Unpublishing` added last): taken 0, node-detached 1, controller-detached 2,
/// ready-to-free 3, unpublishing 4. The release runs taken -> unpublishing -> node-detached ->
/// controller-detached -> ready-to-free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "u8", try_from = "u8")]
pub enum CsiClaimState {
    #[default]
    Taken,
    NodeDetached,
    ControllerDetached,
    ReadyToFree,
    Unpublishing,
}

impl From<CsiClaimState> for u8 {
    fn from(s: CsiClaimState) -> u8 {
        match s {
            CsiClaimState::Taken => 0,
            CsiClaimState::NodeDetached => 1,
            CsiClaimState::ControllerDetached => 2,
            CsiClaimState::ReadyToFree => 3,
            CsiClaimState::Unpublishing => 4,
        }
    }
}

impl TryFrom<u8> for CsiClaimState {
    type Error = String;
    fn try_from(v: u8) -> Result<Self, String> {
        match v {
            0 => Ok(CsiClaimState::Taken),
            1 => Ok(CsiClaimState::NodeDetached),
            2 => Ok(CsiClaimState::ControllerDetached),
            3 => Ok(CsiClaimState::ReadyToFree),
            4 => Ok(CsiClaimState::Unpublishing),
            other => Err(format!("unknown volume claim state {other}")),
        }
    }
}

impl CsiClaimState {
    /// The state's name, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            CsiClaimState::Taken => "taken",
            CsiClaimState::NodeDetached => "node-detached",
            CsiClaimState::ControllerDetached => "controller-detached",
            CsiClaimState::ReadyToFree => "ready-to-free",
            CsiClaimState::Unpublishing => "unpublishing",
        }
    }
}

/// Which CSI services a plugin task runs (the `type` of its `csi_plugin` block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CsiPluginType {
    #[serde(rename = "controller")]
    Controller,
    #[serde(rename = "node")]
    Node,
    /// Both services in one task.
    #[serde(rename = "monolith")]
    Monolith,
}

impl CsiPluginType {
    pub fn parse(s: &str) -> Option<CsiPluginType> {
        match s {
            "controller" => Some(CsiPluginType::Controller),
            "node" => Some(CsiPluginType::Node),
            "monolith" => Some(CsiPluginType::Monolith),
            _ => None,
        }
    }

    pub fn runs_controller(self) -> bool {
        matches!(self, CsiPluginType::Controller | CsiPluginType::Monolith)
    }

    pub fn runs_node(self) -> bool {
        matches!(self, CsiPluginType::Node | CsiPluginType::Monolith)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_use_nomads_strings_and_unknown_is_empty() {
        assert_eq!(
            serde_json::to_string(&CsiAccessMode::MultiNodeSingleWriter).unwrap(),
            "\"multi-node-single-writer\""
        );
        assert_eq!(
            serde_json::from_str::<CsiAccessMode>("\"\"").unwrap(),
            CsiAccessMode::Unknown
        );
        assert_eq!(
            serde_json::from_str::<CsiAttachmentMode>("\"file-system\"").unwrap(),
            CsiAttachmentMode::FileSystem
        );
        assert!(serde_json::from_str::<CsiAccessMode>("\"rw\"").is_err());
        assert_eq!(
            CsiAccessMode::parse("single-node-writer"),
            Some(CsiAccessMode::SingleNodeWriter)
        );
        assert!(CsiAccessMode::SingleNodeWriter.is_writable());
        assert!(!CsiAccessMode::MultiNodeReader.is_writable());
    }

    #[test]
    fn claim_states_and_modes_are_go_iota_numbers() {
        let states = [
            (CsiClaimState::Taken, "0"),
            (CsiClaimState::NodeDetached, "1"),
            (CsiClaimState::ControllerDetached, "2"),
            (CsiClaimState::ReadyToFree, "3"),
            (CsiClaimState::Unpublishing, "4"),
        ];
        for (state, json) in states {
            assert_eq!(serde_json::to_string(&state).unwrap(), json);
            assert_eq!(serde_json::from_str::<CsiClaimState>(json).unwrap(), state);
        }
        assert_eq!(serde_json::to_string(&CsiClaimMode::Write).unwrap(), "1");
        assert!(serde_json::from_str::<CsiClaimState>("9").is_err());
        assert!(serde_json::from_str::<CsiClaimMode>("3").is_err());
    }
}
