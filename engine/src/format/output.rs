//! Output files that appear whole or not at all.
//!
//! A [`Staged`] file is written under a temporary name in its own folder (so the final
//! rename stays within one file system) and renamed over its path only by
//! [`Staged::commit`]. Dropped without a commit, the temporary file is removed: a run that
//! fails leaves an existing file as it was, and never a half-written one. The file is
//! created like any other (mode 0666 less the umask).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// One output file being written.
#[derive(Debug)]
pub struct Staged {
    path: PathBuf,
    /// The temporary name while the file is not in place; `None` for a path written
    /// directly (see [`Staged::create`]).
    tmp: Option<PathBuf>,
}

impl Staged {
    /// Opens `path` for writing under a temporary name beside it. A path that exists and
    /// is not a regular file (a pipe, `/dev/stdout`) is opened as it is: replacing it would
    /// not write to it.
    pub fn create(path: &Path) -> io::Result<(Staged, File)> {
        if fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            let file = File::create(path)?;
            return Ok((
                Staged {
                    path: path.to_owned(),
                    tmp: None,
                },
                file,
            ));
        }
        let name = path
            .file_name()
            .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
        let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        Ok((
            Staged {
                path: path.to_owned(),
                tmp: Some(tmp),
            },
            file,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Puts the file in place; call once everything is written and flushed.
    pub fn commit(mut self) -> io::Result<()> {
        match self.tmp.take() {
            Some(tmp) => fs::rename(&tmp, &self.path).inspect_err(|_| {
                // Nothing else will remove it.
                let _ = fs::remove_file(&tmp);
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            // The run failed: its partial output goes, whatever was at the path stays.
            let _ = fs::remove_file(tmp);
        }
    }
}

/// Why `path` cannot be written as an output (`None` when it can be tried): its folder is
/// missing, or it is a folder. Missing folders are not created: a typo in a path should
/// not make a tree of folders.
pub fn path_problem(path: &Path) -> Option<String> {
    if path.is_dir() {
        return Some("is a directory; write a file path such as out.json".into());
    }
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) if !parent.is_dir() => Some(format!(
            "the directory {} does not exist; create it or write elsewhere",
            parent.display()
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("hairline-output-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("temp dir is writable");
        dir
    }

    #[test]
    fn a_committed_file_replaces_the_old_one_and_an_uncommitted_one_leaves_it() {
        let dir = scratch("commit");
        let path = dir.join("summary.json");
        fs::write(&path, "old").expect("writable");

        let (staged, mut file) = Staged::create(&path).expect("created");
        file.write_all(b"half").expect("written");
        drop(file);
        drop(staged);
        assert_eq!(fs::read_to_string(&path).expect("readable"), "old");

        let (staged, mut file) = Staged::create(&path).expect("created");
        file.write_all(b"new").expect("written");
        drop(file);
        staged.commit().expect("renamed");
        assert_eq!(fs::read_to_string(&path).expect("readable"), "new");
        let left: Vec<_> = fs::read_dir(&dir).expect("listable").collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_folders_and_folders_are_named() {
        let dir = scratch("problems");
        let missing = dir.join("no-such").join("x.json");
        let problem = path_problem(&missing).expect("a problem");
        assert!(problem.contains("does not exist"), "{problem}");
        assert!(path_problem(&dir).is_some_and(|p| p.contains("is a directory")));
        assert!(path_problem(&dir.join("x.json")).is_none());
        assert!(path_problem(Path::new("relative.json")).is_none());
        let _ = fs::remove_dir_all(&dir);
    }
}
