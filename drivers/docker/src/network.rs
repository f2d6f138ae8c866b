//! Bridge networking for docker tasks (Nomad's `DriverNetworkManager` of its docker driver):
//! a container can only join the network namespace of another container of the daemon, so
//! the allocation's namespace is held by a "pause" container (`nomad_init_<alloc id>`, with
//! no network of its own) that the client wires up with CNI, and every docker task of the
//! allocation runs with `network_mode = "container:<pause id>"`.
//!
//! The pause image is the plugin's `infra_image`. No registry may be reachable, so Drover's
//! default (`DEFAULT_INFRA_IMAGE`) is built locally on first use: one static x86-64
//! executable of 129 bytes that sleeps in `pause(2)` forever, imported as an image of its own.

use std::collections::BTreeMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, CreateImageOptions};
use drover_abi::{DriverError, NetworkCreateRequest, NetworkIsolation};

use crate::daemon::{message_of, status_of};

/// Nomad's label of the spec that names the pause container.
pub const SANDBOX_LABEL: &str = "docker_sandbox_container_id";
/// The pause image Drover builds itself when none is configured.
pub const DEFAULT_INFRA_IMAGE: &str = "drover-pause:1";
/// How long a pull of a configured `infra_image` may take (Nomad's default).
pub const DEFAULT_INFRA_PULL_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The name of an allocation's pause container (Nomad's).
pub fn pause_container_name(alloc_id: &str) -> String {
    format!("nomad_init_{alloc_id}")
}

/// The network mode a task of a bridge-mode allocation runs with: the pause container's.
pub fn task_network_mode(isolation: Option<&NetworkIsolation>) -> Option<String> {
    isolation
        .and_then(|i| i.labels.get(SANDBOX_LABEL))
        .map(|id| format!("container:{id}"))
}

/// A static x86-64 Linux executable: `loop { pause() }`. One ELF header, one program header
/// loading the file at 0x400000, then the code at 0x400078.
fn pause_elf_x86_64() -> Vec<u8> {
    const BASE: u64 = 0x40_0000;
    const HEADERS: u64 = 64 + 56;
    // mov eax, 34 (pause); syscall; jmp back to the mov.
    const CODE: [u8; 9] = [0xb8, 0x22, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xeb, 0xf7];
    let size = HEADERS + CODE.len() as u64;
    let mut f = Vec::with_capacity(size as usize);
    f.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]); // 64-bit, little endian, v1
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    f.extend_from_slice(&0x3eu16.to_le_bytes()); // EM_X86_64
    f.extend_from_slice(&1u32.to_le_bytes());
    f.extend_from_slice(&(BASE + HEADERS).to_le_bytes()); // entry
    f.extend_from_slice(&64u64.to_le_bytes()); // program headers right after this one
    f.extend_from_slice(&0u64.to_le_bytes()); // no section headers
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&64u16.to_le_bytes());
    f.extend_from_slice(&56u16.to_le_bytes());
    f.extend_from_slice(&1u16.to_le_bytes());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    f.extend_from_slice(&5u32.to_le_bytes()); // read + execute
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&BASE.to_le_bytes());
    f.extend_from_slice(&BASE.to_le_bytes());
    f.extend_from_slice(&size.to_le_bytes());
    f.extend_from_slice(&size.to_le_bytes());
    f.extend_from_slice(&0x1000u64.to_le_bytes());
    f.extend_from_slice(&CODE);
    f
}

/// A tar archive (ustar) holding one executable file `name`.
fn tar_of(name: &str, content: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    let octal = |field: &mut [u8], value: u64| {
        let text = format!("{value:0width$o}\0", width = field.len() - 1);
        field.copy_from_slice(text.as_bytes());
    };
    octal(&mut header[100..108], 0o755);
    octal(&mut header[108..116], 0);
    octal(&mut header[116..124], 0);
    octal(&mut header[124..136], content.len() as u64);
    octal(&mut header[136..148], 0);
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    // The checksum is computed with its own field as spaces.
    header[148..156].copy_from_slice(&[b' '; 8]);
    let sum: u64 = header.iter().map(|&b| u64::from(b)).sum();
    let text = format!("{sum:06o}\0 ");
    header[148..156].copy_from_slice(text.as_bytes());
    let mut out = header.to_vec();
    out.extend_from_slice(content);
    out.resize(out.len().div_ceil(512) * 512, 0);
    // Two zero blocks end the archive.
    out.extend_from_slice(&[0; 1024]);
    out
}

/// Builds [`DEFAULT_INFRA_IMAGE`] from the embedded pause executable.
async fn build_default_image(docker: &Docker) -> Result<(), String> {
    if std::env::consts::ARCH != "x86_64" {
        return Err(format!(
            "Drover's own pause image exists only for x86_64, not {}: set the docker plugin's infra_image",
            std::env::consts::ARCH
        ));
    }
    let (repo, tag) = DEFAULT_INFRA_IMAGE
        .split_once(':')
        .unwrap_or((DEFAULT_INFRA_IMAGE, "latest"));
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(repo.into()),
        tag: Some(tag.into()),
        changes: vec![r#"CMD ["/pause"]"#.into()],
        ..Default::default()
    };
    let archive = tar_of("pause", &pause_elf_x86_64());
    let mut progress = docker.create_image(
        Some(options),
        Some(bollard::body_full(archive.into())),
        None,
    );
    crate::images::first_failure(&mut progress)
        .await
        .map_err(|reason| format!("building {DEFAULT_INFRA_IMAGE}: {reason}"))
}

/// Makes the pause image available: present, built (Drover's default) or pulled.
async fn ensure_infra_image(docker: &Docker, image: &str, timeout: Duration) -> Result<(), String> {
    if docker.inspect_image(image).await.is_ok() {
        return Ok(());
    }
    if image == DEFAULT_INFRA_IMAGE {
        build_default_image(docker).await?;
    } else {
        crate::images::pull(docker, image, timeout)
            .await
            .map_err(|e| format!("infra_image: {e}"))?;
    }
    docker
        .inspect_image(image)
        .await
        .map(drop)
        .map_err(|e| format!("infra_image {image:?}: {}", message_of(&e)))
}

fn network_failed(message: String) -> DriverError {
    DriverError::StartFailed {
        message,
        recoverable: true,
    }
}

/// The pause container of `alloc_id`, running: made and started, or the one a previous
/// attempt left. Its namespace and the spec the tasks join by.
pub async fn create(
    docker: &Docker,
    alloc_id: &str,
    request: &NetworkCreateRequest,
    image: &str,
    pull_timeout: Duration,
) -> Result<NetworkIsolation, DriverError> {
    ensure_infra_image(docker, image, pull_timeout)
        .await
        .map_err(network_failed)?;
    let name = pause_container_name(alloc_id);
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        hostname: (!request.hostname.is_empty()).then(|| request.hostname.clone()),
        labels: Some(
            [(
                crate::container_spec::LABEL_ALLOC_ID.to_string(),
                alloc_id.to_string(),
            )]
            .into_iter()
            .collect(),
        ),
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = CreateContainerOptions {
        name: Some(name.clone()),
        ..Default::default()
    };
    let id = match docker.create_container(Some(options), body).await {
        Ok(created) => created.id,
        // Left by an earlier attempt for the same allocation: use it.
        Err(e) if status_of(&e) == Some(409) => docker
            .inspect_container(&name, None)
            .await
            .ok()
            .and_then(|c| c.id)
            .ok_or_else(|| network_failed(format!("pause container {name}: {}", message_of(&e))))?,
        Err(e) => {
            return Err(network_failed(format!(
                "creating pause container {name}: {}",
                message_of(&e)
            )));
        }
    };
    if let Err(e) = docker.start_container(&id, None).await
        && status_of(&e) != Some(304)
    {
        let _ = remove(docker, &id).await;
        return Err(network_failed(format!(
            "starting pause container {name}: {}",
            message_of(&e)
        )));
    }
    let pid = docker
        .inspect_container(&id, None)
        .await
        .ok()
        .and_then(|c| c.state)
        .and_then(|s| s.pid)
        .filter(|p| *p > 0);
    let Some(pid) = pid else {
        let _ = remove(docker, &id).await;
        return Err(network_failed(format!(
            "pause container {name} is not running"
        )));
    };
    Ok(NetworkIsolation {
        path: format!("/proc/{pid}/ns/net").into(),
        labels: BTreeMap::from([(SANDBOX_LABEL.to_string(), id)]),
    })
}

/// Removes a pause container; one already gone is fine.
pub async fn remove(docker: &Docker, id: &str) -> Result<(), String> {
    crate::driver::remove_container(docker, id).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_executable_is_a_loadable_elf_whose_entry_is_its_code() {
        let elf = pause_elf_x86_64();
        assert_eq!(elf.len(), 129);
        assert_eq!(&elf[..4], b"\x7fELF");
        let entry = u64::from_le_bytes(elf[24..32].try_into().unwrap());
        assert_eq!(entry, 0x40_0000 + 120);
        let filesz = u64::from_le_bytes(elf[64 + 32..64 + 40].try_into().unwrap());
        assert_eq!(filesz, elf.len() as u64);
        assert_eq!(&elf[120..], &[0xb8, 0x22, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7]);
    }

    #[test]
    fn the_archive_is_ustar_with_a_valid_checksum_and_two_end_blocks() {
        let tar = tar_of("pause", b"abc");
        assert_eq!(tar.len(), 512 + 512 + 1024);
        let mut header = tar[..512].to_vec();
        let stored =
            u64::from_str_radix(std::str::from_utf8(&header[148..154]).unwrap().trim(), 8).unwrap();
        header[148..156].copy_from_slice(&[b' '; 8]);
        assert_eq!(stored, header.iter().map(|&b| u64::from(b)).sum::<u64>());
        assert_eq!(&tar[512..515], b"abc");
        assert!(tar[1024..].iter().all(|&b| b == 0));
    }

    #[test]
    fn tasks_join_the_pause_container_named_by_the_label() {
        let spec = NetworkIsolation {
            path: "/proc/1/ns/net".into(),
            labels: BTreeMap::from([(SANDBOX_LABEL.to_string(), "abc".to_string())]),
        };
        assert_eq!(
            task_network_mode(Some(&spec)).as_deref(),
            Some("container:abc")
        );
        assert_eq!(task_network_mode(None), None);
    }
}
