//! Report files are written whole or not at all: into a temporary file beside the
//! target, flushed to disk, then renamed over it, so a full disk or a killed process
//! leaves the previous file (or none), never a truncated one that `compare` or a
//! dashboard would read as a report.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// Writes `bytes` to `path` atomically. A failure removes the temporary file and leaves
/// `path` as it was.
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map_or("file".into(), |n| n.to_string_lossy());
    // The mode `std::fs::write` would give (0666 less the umask), not tempfile's 0600.
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.tmp-"))
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    tmp.write_all(bytes.as_ref())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename itself reaches the disk with the folder's entry.
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.md");
        std::fs::write(&path, "old and longer than the new text\n").unwrap();
        write(&path, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        write(&dir.path().join("fresh.json"), b"{}").unwrap();
        assert_eq!(names(dir.path()), ["fresh.json", "report.md"]);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o044, 0o044, "readable by others as std::fs::write makes it: {mode:o}");
    }

    #[test]
    fn a_failed_rename_leaves_the_old_file_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // The target is a folder with a file in it: the rename over it fails after the
        // temporary file was written in full.
        let target = dir.path().join("report.html");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("old"), "old").unwrap();
        assert!(write(&target, "new").is_err());
        assert_eq!(std::fs::read_to_string(target.join("old")).unwrap(), "old");
        assert_eq!(names(dir.path()), ["report.html"]);
    }
}
