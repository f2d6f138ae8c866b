//! CSI volume snapshots as Nomad's API carries them (`structs.CSISnapshot` and the create,
//! delete and list requests and answers of `/v1/volumes/snapshot`). The servers keep no
//! snapshot: they exist only in the storage provider, reached through the plugin's controller.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A snapshot: the storage provider's view, plus what a create request names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiSnapshot {
    /// The storage provider's id of the snapshot.
    #[serde(rename = "ID")]
    pub id: String,
    /// The storage provider's id of the volume it was taken of.
    #[serde(rename = "ExternalSourceVolumeID")]
    pub external_source_volume_id: String,
    #[serde(rename = "SizeBytes")]
    pub size_bytes: i64,
    /// Seconds since the Unix epoch, as the plugin reported (Nomad keeps seconds).
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "IsReady")]
    pub is_ready: bool,
    /// Nomad's id of the source volume (a create request names the volume by it).
    #[serde(rename = "SourceVolumeID")]
    pub source_volume_id: String,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,

    /// Create only: the suggested name, the plugin's idempotency key.
    #[serde(rename = "Name")]
    pub name: String,
    /// Create only: secrets for the plugin. Never answered (see [`CsiSnapshot::sanitized`]).
    #[serde(rename = "Secrets")]
    pub secrets: Option<BTreeMap<String, String>>,
    /// Create only: plugin parameters.
    #[serde(rename = "Parameters")]
    pub parameters: Option<BTreeMap<String, String>>,
}

impl CsiSnapshot {
    /// The snapshot as the API answers it: no secrets.
    pub fn sanitized(&self) -> CsiSnapshot {
        CsiSnapshot {
            secrets: None,
            ..self.clone()
        }
    }
}

/// `PUT /v1/volumes/snapshot`'s body (Nomad's `CSISnapshotCreateRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiSnapshotCreateRequest {
    #[serde(rename = "Snapshots")]
    pub snapshots: Vec<CsiSnapshot>,
}

/// One page of a plugin's snapshots (Nomad's `CSISnapshotListResponse` without the query
/// meta); an empty `next_token` is the last page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiSnapshotList {
    #[serde(rename = "Snapshots")]
    pub snapshots: Vec<CsiSnapshot>,
    #[serde(rename = "NextToken")]
    pub next_token: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_request_decodes_nomads_body_and_answers_keep_no_secrets() {
        let req: CsiSnapshotCreateRequest = serde_json::from_str(
            r#"{"Snapshots":[{"SourceVolumeID":"db","Name":"nightly",
                "Secrets":{"token":"s3cr3t"},"Parameters":{"a":"b"},"PluginID":""}]}"#,
        )
        .unwrap();
        let snap = &req.snapshots[0];
        assert_eq!(snap.source_volume_id, "db");
        assert_eq!(snap.name, "nightly");
        assert_eq!(snap.secrets.as_ref().unwrap()["token"], "s3cr3t");
        let answered = serde_json::to_string(&snap.sanitized()).unwrap();
        assert!(!answered.contains("s3cr3t"), "{answered}");
        assert!(answered.contains(r#""Secrets":null"#), "{answered}");
        for key in [
            "ExternalSourceVolumeID",
            "SizeBytes",
            "CreateTime",
            "IsReady",
        ] {
            assert!(answered.contains(key), "{key} missing: {answered}");
        }
    }
}
