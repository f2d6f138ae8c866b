//! Images: making a task's image available (local, loaded from an archive, or pulled) and
//! removing images no task uses any more, after a delay (Nomad's image coordinator).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{CreateImageOptions, ImportImageOptions, RemoveImageOptions};
use futures_util::StreamExt;
use thiserror::Error;

use crate::daemon::{is_not_found, message_of};
use crate::runtime;
use crate::task_config::DockerTaskConfig;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ImageError {
    #[error("unable to open image archive {path}: {reason}")]
    Archive { path: String, reason: String },
    #[error("loading image archive {path}: {reason}")]
    Load { path: String, reason: String },
    #[error("failed to pull image {image:?}: {reason}")]
    Pull { image: String, reason: String },
    #[error("pulling image {image:?} timed out after {timeout:?}")]
    PullTimeout { image: String, timeout: Duration },
    #[error("image {image:?} is not available: {reason}")]
    Missing { image: String, reason: String },
}

impl ImageError {
    /// Whether starting the task again may succeed.
    pub fn recoverable(&self) -> bool {
        matches!(
            self,
            ImageError::Pull { .. } | ImageError::PullTimeout { .. }
        )
    }
}

/// `repo[:tag]` or `repo@digest` split for the pull API; the tag defaults to "latest".
pub fn split_reference(image: &str) -> (String, Option<String>) {
    if image.contains('@') {
        return (image.to_string(), None);
    }
    let last_slash = image.rfind('/').map(|i| i + 1).unwrap_or(0);
    match image[last_slash..].rfind(':') {
        Some(i) => (
            image[..last_slash + i].to_string(),
            Some(image[last_slash + i + 1..].to_string()),
        ),
        None => (image.to_string(), Some("latest".to_string())),
    }
}

async fn load(docker: &Docker, archive: &Path) -> Result<(), ImageError> {
    let path = archive.display().to_string();
    let bytes = tokio::fs::read(archive)
        .await
        .map_err(|e| ImageError::Archive {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    let mut progress = docker.import_image(
        ImportImageOptions {
            quiet: true,
            ..Default::default()
        },
        bollard::body_full(bytes.into()),
        None,
    );
    first_failure(&mut progress)
        .await
        .map_err(|reason| ImageError::Load { path, reason })
}

/// Follows an image operation's progress stream to its end; the first failure it reports.
pub(crate) async fn first_failure<S, I>(progress: &mut S) -> Result<(), String>
where
    S: futures_util::Stream<Item = Result<I, bollard::errors::Error>> + Unpin,
    I: ProgressItem,
{
    while let Some(item) = progress.next().await {
        let failed = match item {
            Ok(info) => info.failure(),
            Err(e) => Some(message_of(&e)),
        };
        if let Some(reason) = failed {
            return Err(reason);
        }
    }
    Ok(())
}

/// An item of an image operation's progress stream that may report a failure.
pub(crate) trait ProgressItem {
    fn failure(self) -> Option<String>;
}

impl ProgressItem for bollard::models::CreateImageInfo {
    fn failure(self) -> Option<String> {
        self.error_detail.and_then(|d| d.message)
    }
}

impl ProgressItem for bollard::models::BuildInfo {
    fn failure(self) -> Option<String> {
        self.error_detail.and_then(|d| d.message)
    }
}

pub(crate) async fn pull(
    docker: &Docker,
    image: &str,
    timeout: Duration,
) -> Result<(), ImageError> {
    let (repo, tag) = split_reference(image);
    let options = CreateImageOptions {
        from_image: Some(repo),
        tag,
        ..Default::default()
    };
    let pulling = async {
        let mut progress = docker.create_image(Some(options), None, None);
        first_failure(&mut progress)
            .await
            .map_err(|reason| ImageError::Pull {
                image: image.to_string(),
                reason,
            })
    };
    match tokio::time::timeout(timeout, pulling).await {
        Ok(r) => r,
        Err(_) => Err(ImageError::PullTimeout {
            image: image.to_string(),
            timeout,
        }),
    }
}

/// Makes the task's image available and returns its id. An image already present is used as
/// it is (no registry may be reachable, so even `latest` is not pulled again) unless
/// `force_pull` is set; otherwise it is loaded from `load` (relative to the task's `local/`
/// dir) or pulled.
pub async fn ensure_image(
    docker: &Docker,
    cfg: &DockerTaskConfig,
    task_local_dir: &Path,
) -> Result<String, ImageError> {
    if !cfg.force_pull
        && let Ok(found) = docker.inspect_image(&cfg.image).await
    {
        return Ok(found.id.unwrap_or_default());
    }
    if !cfg.load.is_empty() {
        load(docker, &task_local_dir.join(&cfg.load)).await?;
    } else {
        pull(docker, &cfg.image, cfg.image_pull_timeout).await?;
    }
    match docker.inspect_image(&cfg.image).await {
        Ok(found) => Ok(found.id.unwrap_or_default()),
        Err(e) => Err(ImageError::Missing {
            image: cfg.image.clone(),
            reason: message_of(&e),
        }),
    }
}

#[derive(Default)]
struct ImageUse {
    tasks: HashSet<String>,
    /// Bumped on every new use, so that a pending removal notices it was overtaken.
    generation: u64,
}

/// Which tasks use which image (by the reference the task config names), and the removal of
/// images nobody uses.
#[derive(Default)]
pub struct ImageRefs {
    uses: Mutex<HashMap<String, ImageUse>>,
}

impl ImageRefs {
    fn uses(&self) -> MutexGuard<'_, HashMap<String, ImageUse>> {
        self.uses.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn add(&self, image: &str, task_id: &str) {
        let mut uses = self.uses();
        let entry = uses.entry(image.to_string()).or_default();
        entry.tasks.insert(task_id.to_string());
        entry.generation += 1;
    }

    /// Drops `task_id`'s use of `image`; returns the generation to check before removing the
    /// image when nobody uses it any more.
    pub fn release(&self, image: &str, task_id: &str) -> Option<u64> {
        let mut uses = self.uses();
        let entry = uses.get_mut(image)?;
        entry.tasks.remove(task_id);
        entry.tasks.is_empty().then_some(entry.generation)
    }

    fn still_unused(&self, image: &str, generation: u64) -> bool {
        let mut uses = self.uses();
        let unused = uses
            .get(image)
            .is_some_and(|u| u.tasks.is_empty() && u.generation == generation);
        if unused {
            uses.remove(image);
        }
        unused
    }

    #[cfg(test)]
    pub fn users(&self, image: &str) -> usize {
        self.uses().get(image).map_or(0, |u| u.tasks.len())
    }

    /// After `delay`, removes `image` unless a task started using it meanwhile. The daemon
    /// refuses to remove an image a container (of anyone) still uses; that is not an error here.
    pub fn remove_later(
        self: &Arc<Self>,
        docker: Docker,
        image: String,
        generation: u64,
        delay: Duration,
    ) {
        let refs = Arc::clone(self);
        let spawned = runtime::spawn(async move {
            tokio::time::sleep(delay).await;
            if !refs.still_unused(&image, generation) {
                return;
            }
            let options = RemoveImageOptions {
                force: false,
                ..Default::default()
            };
            match docker.remove_image(&image, Some(options), None).await {
                Ok(_) => tracing::info!(image = %image, "removed unused image"),
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    tracing::debug!(image = %image, error = %message_of(&e), "image not removed")
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot schedule image removal");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_repo_and_tag() {
        assert_eq!(
            split_reference("busybox"),
            ("busybox".into(), Some("latest".into()))
        );
        assert_eq!(
            split_reference("busybox:1.36"),
            ("busybox".into(), Some("1.36".into()))
        );
        assert_eq!(
            split_reference("localhost:5000/team/app:v2"),
            ("localhost:5000/team/app".into(), Some("v2".into()))
        );
        assert_eq!(
            split_reference("localhost:5000/app"),
            ("localhost:5000/app".into(), Some("latest".into()))
        );
        assert_eq!(
            split_reference("app@sha256:abc"),
            ("app@sha256:abc".into(), None)
        );
    }

    #[test]
    fn an_image_is_unused_only_after_its_last_task_and_a_new_use_cancels_removal() {
        let refs = ImageRefs::default();
        refs.add("img", "t1");
        refs.add("img", "t2");
        assert_eq!(refs.release("img", "t1"), None);
        let generation = refs.release("img", "t2").unwrap();
        refs.add("img", "t3");
        assert!(!refs.still_unused("img", generation));
        let generation = refs.release("img", "t3").unwrap();
        assert!(refs.still_unused("img", generation));
        assert_eq!(refs.users("img"), 0);
    }
}
