//! Files a scenario names (`strategy_files`, a step's `lua_file`) are read only from the
//! folder of the file that names them and below, only when they are regular files of at
//! most `MAX_FILE_BYTES`, all checked before a byte is read: their text ends up in
//! reports and server errors, so a path must not reach `.env` or `/proc/self/environ`.
//! No refusal quotes a byte of the file.

use std::fs::{File, Metadata};
use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Component, Path};

/// The largest file a scenario may name (a Lua script or a strategy file).
pub const MAX_FILE_BYTES: u64 = 256 * 1024;

/// A named file's text and where it is.
#[derive(Debug)]
pub(crate) struct Confined {
    /// The folder of the naming file joined with the given path, as the user wrote both.
    #[cfg_attr(not(test), allow(dead_code))]
    pub shown: String,
    pub text: String,
}

/// Reads `given`, a path written in the file at `naming`, from `naming`'s folder (the
/// current folder when it has none). The error is one line naming `given`, never its
/// content: `cannot read <what> <given>: <why>`.
pub(crate) fn read(naming: &str, given: &str, what: &str) -> Result<Confined, String> {
    let parent = Path::new(naming).parent().unwrap_or(Path::new(""));
    let shown = parent.join(given).display().to_string();
    let folder = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
    let fail = |why: String| format!("cannot read {what} {}: {why}", given.escape_debug());
    let text = check_and_read(folder, given).map_err(fail)?;
    Ok(Confined { shown, text })
}

fn check_and_read(folder: &Path, given: &str) -> Result<String, String> {
    let inside = format!("files are read from {} and below", folder.display());
    let path = Path::new(given);
    if given.is_empty() {
        return Err("an empty path".into());
    }
    if path.is_absolute() {
        return Err(format!("an absolute path; {inside}"));
    }
    if leaves(path) {
        return Err(format!("`..` leaves {}; {inside}", folder.display()));
    }
    let root = std::fs::canonicalize(folder).map_err(|e| format!("its folder {}: {e}", folder.display()))?;
    let real = std::fs::canonicalize(root.join(path)).map_err(|e| e.to_string())?;
    if !real.starts_with(&root) {
        return Err(format!("it resolves (through a symbolic link) outside {}; {inside}", folder.display()));
    }
    let meta = std::fs::metadata(&real).map_err(|e| e.to_string())?;
    regular_and_small(&meta)?;
    read_checked(&real, &meta)
}

/// True when a `..` climbs above the folder the path starts in.
fn leaves(path: &Path) -> bool {
    let mut depth = 0usize;
    for c in path.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth == 0 => return true,
            Component::ParentDir => depth -= 1,
            Component::RootDir | Component::Prefix(_) => return true,
        }
    }
    false
}

/// A regular file within the bound (a FIFO would block the read, a device never end).
fn regular_and_small(meta: &Metadata) -> Result<(), String> {
    let t = meta.file_type();
    if !t.is_file() {
        let kind = if t.is_dir() {
            "a directory"
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_socket() {
            "a socket"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else {
            "something else"
        };
        return Err(format!("{kind}, not a regular file"));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("{} bytes, over the bound of {} KiB", meta.len(), MAX_FILE_BYTES / 1024));
    }
    Ok(())
}

/// Opens the checked file, makes sure it is still the one checked, and reads at most
/// the bound (a file growing meanwhile is refused, not cut).
fn read_checked(real: &Path, checked: &Metadata) -> Result<String, String> {
    let file = File::open(real).map_err(|e| e.to_string())?;
    let opened = file.metadata().map_err(|e| e.to_string())?;
    if (opened.dev(), opened.ino()) != (checked.dev(), checked.ino()) {
        return Err("replaced while it was being opened".into());
    }
    regular_and_small(&opened)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("over the bound of {} KiB", MAX_FILE_BYTES / 1024));
    }
    String::from_utf8(bytes)
        .map_err(|e| format!("not UTF-8 text (an invalid byte at offset {})", e.utf8_error().valid_up_to()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A scenario folder `root/scen` beside a file outside it, `root/outside.lua`.
    fn tree() -> (tempfile::TempDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let scen = root.path().join("scen");
        std::fs::create_dir_all(scen.join("lua")).unwrap();
        std::fs::write(scen.join("lua/ok.lua"), "return 1\n").unwrap();
        std::fs::write(root.path().join("outside.lua"), "SECRET-CONTENT\n").unwrap();
        (root, scen)
    }

    fn refused(scen: &Path, given: &str) -> String {
        let naming = scen.join("s.toml").display().to_string();
        let e = read(&naming, given, "Lua file").unwrap_err();
        assert!(e.starts_with(&format!("cannot read Lua file {given}: ")), "{e}");
        assert!(!e.contains("SECRET") && !e.contains('\n'), "{e}");
        e
    }

    #[test]
    fn a_file_inside_is_read_and_paths_out_are_refused() {
        let (_root, scen) = tree();
        let naming = scen.join("s.toml").display().to_string();
        let ok = read(&naming, "lua/ok.lua", "Lua file").unwrap();
        assert_eq!(ok.text, "return 1\n");
        assert_eq!(ok.shown, scen.join("lua/ok.lua").display().to_string());
        assert_eq!(read(&naming, "lua/../lua/./ok.lua", "Lua file").unwrap().text, "return 1\n");
        let outside = scen.parent().unwrap().join("outside.lua").display().to_string();
        assert!(refused(&scen, &outside).contains("an absolute path"));
        assert!(refused(&scen, "../outside.lua").contains("`..` leaves"));
        assert!(refused(&scen, "lua/../../outside.lua").contains("`..` leaves"));
        assert!(refused(&scen, "/proc/self/environ").contains("an absolute path"));
        assert!(refused(&scen, "").contains("an empty path"));
        assert!(refused(&scen, "lua/none.lua").contains("No such file"));
    }

    #[test]
    fn a_symbolic_link_out_of_the_folder_is_refused() {
        let (_root, scen) = tree();
        std::os::unix::fs::symlink("../../outside.lua", scen.join("lua/link.lua")).unwrap();
        std::os::unix::fs::symlink(scen.parent().unwrap(), scen.join("up")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", scen.join("zero.lua")).unwrap();
        for given in ["lua/link.lua", "up/outside.lua", "zero.lua"] {
            assert!(refused(&scen, given).contains("outside"), "{given}");
        }
        // A link that stays inside is followed.
        std::os::unix::fs::symlink("ok.lua", scen.join("lua/alias.lua")).unwrap();
        let naming = scen.join("s.toml").display().to_string();
        assert_eq!(read(&naming, "lua/alias.lua", "Lua file").unwrap().text, "return 1\n");
    }

    #[test]
    fn special_files_and_big_files_are_refused_before_a_read() {
        let (_root, scen) = tree();
        std::fs::create_dir(scen.join("dir.lua")).unwrap();
        assert!(refused(&scen, "dir.lua").contains("a directory, not a regular file"));
        let _socket = std::os::unix::net::UnixListener::bind(scen.join("sock.lua")).unwrap();
        assert!(refused(&scen, "sock.lua").contains("a socket, not a regular file"));
        // A FIFO nobody writes to: opening it would block this test for ever.
        let made = std::process::Command::new("mkfifo").arg(scen.join("fifo.lua")).status().unwrap();
        assert!(made.success());
        assert!(refused(&scen, "fifo.lua").contains("a FIFO, not a regular file"));
        let big = scen.join("big.lua");
        std::fs::write(&big, vec![b'-'; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert!(refused(&scen, "big.lua").contains("262145 bytes, over the bound of 256 KiB"));
        std::fs::write(&big, vec![b'-'; MAX_FILE_BYTES as usize]).unwrap();
        let naming = scen.join("s.toml").display().to_string();
        assert_eq!(read(&naming, "big.lua", "Lua file").unwrap().text.len(), MAX_FILE_BYTES as usize);
    }

    #[test]
    fn a_file_that_is_not_utf8_is_refused_without_its_bytes() {
        let (_root, scen) = tree();
        std::fs::write(scen.join("bin.lua"), b"SECRET\xff\xfeSECRET").unwrap();
        assert!(refused(&scen, "bin.lua").ends_with("not UTF-8 text (an invalid byte at offset 6)"));
    }

    #[test]
    fn without_a_folder_the_current_one_is_the_root() {
        // `cargo test` runs in the crate's folder: src/lib.rs is inside, its parent not.
        assert!(read("s.toml", "src/lib.rs", "Lua file").unwrap().text.starts_with("//!"));
        assert!(read("s.toml", "../plan/src/lib.rs", "Lua file").unwrap_err().contains("`..` leaves ."));
    }
}
