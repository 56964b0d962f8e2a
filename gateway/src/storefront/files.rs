//! The copies under `storefront.dir`: each page and asset written whole or not at all, so any
//! web server or CDN can serve the same files.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::Storefront;

impl Storefront {
    /// Creates `storefront.dir` and writes what holds no data (assets, the admin page); at
    /// start, so a directory that cannot be written stops the start.
    pub async fn prepare_dir(&self) -> anyhow::Result<()> {
        if let Some(dir) = &self.dir {
            tokio::fs::create_dir_all(dir)
                .await
                .with_context(|| format!("storefront.dir {}", dir.display()))?;
            self.write_static().await?;
        }
        Ok(())
    }

    /// The files that hold no data (under `storefront.dir`, when set).
    pub(super) async fn write_static(&self) -> anyhow::Result<()> {
        self.write("static/store.js", self.store_js.body()).await?;
        self.write("static/store.css", self.store_css.body()).await?;
        self.write("static/admin.js", self.admin_js.body()).await?;
        self.write("static/work.js", self.work_js.body()).await?;
        self.write("admin.html", self.admin.body()).await
    }

    /// Writes `file` under `storefront.dir` (when set) whole or not at all: a temporary file
    /// renamed over it, so a web server reading it never sees half a page.
    pub(super) async fn write(&self, file: &str, body: &[u8]) -> anyhow::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let path = dir.join(file);
        let parent = path.parent().unwrap_or(dir);
        tokio::fs::create_dir_all(parent).await.with_context(|| format!("create {}", parent.display()))?;
        let temp = temp_path(&path);
        tokio::fs::write(&temp, body).await.with_context(|| format!("write {}", temp.display()))?;
        if let Err(e) = tokio::fs::rename(&temp, &path).await {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(e).with_context(|| format!("rename onto {}", path.display()));
        }
        Ok(())
    }

    /// As `write`, for a page served anyway: a failure is logged, the buyer still gets it.
    pub(super) async fn write_logged(&self, file: &str, body: &[u8]) {
        if let Err(e) = self.write(file, body).await {
            tracing::warn!(error.cause_chain = %format_args!("{e:#}"), "storefront: a page was not written to storefront.dir");
        }
    }
}

/// A temporary name next to `path`, unique to this write.
fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()))
}
