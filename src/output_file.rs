//! The one way tpsim writes a file: plan files (`plan --save`), calibrated profiles
//! (`calibrate --output`), sweep charts and report directories all come through here.
//!
//! A write never leaves a half-written file where the user's was: the bytes go to a new temporary
//! file beside the target (same directory, so the same file system), are synced, and the temporary
//! file is renamed over the target (POSIX `rename(2)` is atomic). On any failure the temporary file
//! is removed and the target is untouched. Temporary names are created with `O_EXCL`
//! (`create_new`), so tpsim never removes a file it did not create. An output that is one of the
//! command's inputs is refused before any work (`--save m.yaml --model m.yaml` would replace the
//! model with the plan).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::input_file::quote;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{flag} '': needs a {what}; e.g. {flag} {example}")]
    Empty {
        flag: String,
        /// "file name" or "directory".
        what: &'static str,
        example: String,
    },
    /// `-`, which many tools read as standard output: tpsim would write a file (or a directory)
    /// named `-` and print nothing more.
    #[error(
        "{flag} -: tpsim writes a {what} here, not standard output, and would create a {what} named '-'; give a name, e.g. {flag} {example}"
    )]
    Dash {
        flag: String,
        /// "file" or "directory".
        what: &'static str,
        example: String,
    },
    #[error("{flag} {path}: is a directory, and the output is one file; name a file inside it")]
    IsDirectory { flag: String, path: String },
    #[error(
        "{flag} {path}: tpsim writes {} there, but the name ends .{extension}; name it .{} (e.g. {flag} {example})",
        .kind.format().map_or("", |(format, _)| format),
        .kind.format().map_or("", |(_, extensions)| extensions[0])
    )]
    WrongExtension {
        flag: String,
        path: String,
        kind: OutputKind,
        extension: String,
        example: String,
    },
    #[error(
        "{flag} {path}: exists and is not a regular file; tpsim only replaces regular files (choose another path)"
    )]
    NotRegular { flag: String, path: String },
    #[error("{flag} {path}: {folder} is a file, not a folder; write elsewhere")]
    FolderIsFile {
        flag: String,
        path: String,
        folder: String,
    },
    #[error("{flag} {path}: the folder {folder} does not exist; create it or write elsewhere")]
    NoFolder {
        flag: String,
        path: String,
        folder: String,
    },
    #[error(
        "{flag} {path}: the folder {link} is a link to {target}, which does not exist (or links in a loop); create {target}, remove the link, or write elsewhere"
    )]
    FolderLinkBroken {
        flag: String,
        path: String,
        link: String,
        target: String,
    },
    #[error("{flag} {path}: cannot write there: {reason}; choose a writable path")]
    NotWritable {
        flag: String,
        path: String,
        reason: String,
    },
    #[error(
        "{flag} {path}: is the input given with {input_flag}, and writing it would replace that input; write to another path"
    )]
    IsInput {
        flag: String,
        path: String,
        input_flag: String,
    },
    #[error(
        "{flag} {dir}: the report writes {file}, which is the input given with {input_flag}, and would replace it; write the report to another directory"
    )]
    ReportReplacesInput {
        flag: String,
        dir: String,
        file: String,
        input_flag: String,
    },
    #[error(
        "{flag} {path}: is {file}, which the report given with {report} also writes, so one would replace the other; save to another file name (e.g. {example}) or write the report elsewhere"
    )]
    ReportReplacesOutput {
        flag: String,
        path: String,
        file: String,
        /// The report's flag and directory, as given (`--report rep`).
        report: String,
        example: String,
    },
    #[error(
        "{flag} {path}: is a folder that {report} needs, so the file written there would block the report; give the file and the report different paths"
    )]
    FileIsReportDir {
        flag: String,
        path: String,
        /// The report's flag and directory, as given (`--report rep`).
        report: String,
    },
    #[error(
        "{flag} {path}: cannot create the report directory: {folder} is a file, not a folder; choose another path"
    )]
    CannotCreate {
        flag: String,
        path: String,
        folder: String,
    },
    #[error(
        "{flag} {path}: {link} is a link to {target}, which does not exist (or links in a loop), so the report's directory cannot be made there; create {target}, remove the link, or choose another path"
    )]
    BrokenLink {
        flag: String,
        path: String,
        link: String,
        target: String,
    },
    #[error(
        "{flag} {path}: a file with that name exists, and the report needs a directory; give another path or remove the file"
    )]
    ReportIsFile { flag: String, path: String },
    #[error(
        "{flag} {path}: the file there was not written by {writer}, and tpsim replaces only its own outputs; choose another path, or move that file away first"
    )]
    NotOurs {
        flag: String,
        path: String,
        writer: &'static str,
    },
    #[error(
        "{flag} {dir}: the report writes {file}, and what is there is not part of a report tpsim wrote; write the report to a new directory, or move it away first"
    )]
    ReportReplacesUserFile {
        flag: String,
        dir: String,
        file: String,
    },
    #[error(
        "{flag} {dir}: the report writes {file}, which is a link to {target}, and a report holds only files tpsim wrote there, so writing it would replace {target}; remove the link, or write the report to a new directory"
    )]
    ReportFileIsLink {
        flag: String,
        dir: String,
        file: String,
        target: String,
    },
}

/// What tpsim writes to one file. A file already at the path is replaced only when it is an
/// earlier output of the same kind (a plan tpsim saved, a profile it measured, a chart it drew) or
/// empty; anything else is the user's, and the write is refused before any work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputKind {
    /// `plan --save`: starts with the `# Written by \`tpsim plan\`` line.
    Plan,
    /// `calibrate --output`: starts with the `# Written by \`tpsim calibrate\`` line.
    Profile,
    /// `sweep --chart`: the SVG plotters draws, titled "Best plan ...".
    Chart,
    /// One file of a report directory: [`write_report_dir`] checks the directory as a whole.
    ReportFile,
}

impl OutputKind {
    /// What the file holds and the extensions that say so (a name without an extension is
    /// accepted); `None` where the name is tpsim's own (a report's files).
    fn format(self) -> Option<(&'static str, &'static [&'static str])> {
        match self {
            OutputKind::Plan => Some(("a YAML plan file", &["yaml", "yml"])),
            OutputKind::Profile => Some(("a YAML GPU profile", &["yaml", "yml"])),
            OutputKind::Chart => Some(("an SVG image", &["svg"])),
            OutputKind::ReportFile => None,
        }
    }

    fn writer(self) -> &'static str {
        match self {
            OutputKind::Plan => "`tpsim plan --save`",
            OutputKind::Profile => "`tpsim calibrate`",
            OutputKind::Chart => "`tpsim sweep --chart`",
            OutputKind::ReportFile => "`tpsim report`",
        }
    }

    /// Whether `head`, the start of an existing file, is this kind of tpsim output.
    fn is_ours(self, head: &str) -> bool {
        match self {
            OutputKind::Plan => head.starts_with("# Written by `tpsim plan`"),
            OutputKind::Profile => head.starts_with("# Written by `tpsim calibrate`"),
            OutputKind::Chart => {
                head.starts_with("<svg ")
                    && head
                        .lines()
                        .next()
                        .is_some_and(|l| l.contains(SVG_NAMESPACE))
                    && head.contains("\nBest plan ")
            }
            OutputKind::ReportFile => true,
        }
    }
}

const SVG_NAMESPACE: &str = "xmlns=\"http://www.w3.org/2000/svg\"";

/// The first few KiB of the file at `path` (lossy), or `None` when it cannot be read.
fn head_of(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Refuses to replace the existing, non-empty regular file at `path` unless it is `kind`'s output.
fn refuse_foreign_file(flag: &str, path: &str, kind: OutputKind) -> Result<(), OutputError> {
    let target = resolved(Path::new(path));
    let Ok(metadata) = std::fs::metadata(&target) else {
        return Ok(());
    };
    if !metadata.is_file() || metadata.len() == 0 {
        return Ok(());
    }
    if head_of(&target).is_some_and(|head| kind.is_ours(&head)) {
        return Ok(());
    }
    Err(OutputError::NotOurs {
        flag: flag.to_string(),
        path: quote(path),
        writer: kind.writer(),
    })
}

/// Refuses a report into the existing directory `dir` when one of the report's files `names` is
/// already there and the directory is not a report tpsim wrote (its `index.html` says so): the
/// user's `index.html` or `memory.svg` would be replaced.
pub fn refuse_foreign_report_files<S: AsRef<str>>(
    flag: &str,
    dir: &str,
    names: &[S],
) -> Result<(), OutputError> {
    let path = Path::new(dir);
    if !path.is_dir() {
        return Ok(());
    }
    // tpsim writes a report's files as regular files, never links or folders: a link named like
    // one is the user's, and writing through it (as `write_file` writes through a `--save` link)
    // would replace the file it points to, wherever that is, even in a directory a report was
    // written to before; a folder (or other non-file) there failed the write midway, after the
    // files before it were replaced, leaving two reports mixed. Both are refused before any write.
    for name in names {
        let file = path.join(name.as_ref());
        let Ok(metadata) = std::fs::symlink_metadata(&file) else {
            continue;
        };
        if !metadata.file_type().is_symlink() && !metadata.is_file() {
            return Err(OutputError::ReportReplacesUserFile {
                flag: flag.to_string(),
                dir: quote(dir),
                file: quote(&file.display().to_string()),
            });
        }
        if metadata.file_type().is_symlink() {
            let target = std::fs::read_link(&file)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            return Err(OutputError::ReportFileIsLink {
                flag: flag.to_string(),
                dir: quote(dir),
                file: quote(&file.display().to_string()),
                target: quote(&target),
            });
        }
    }
    let ours =
        head_of(&path.join("index.html")).is_some_and(|head| head.contains("<title>tpsim report"));
    if ours {
        return Ok(());
    }
    for name in names {
        let file = path.join(name.as_ref());
        if std::fs::metadata(&file).is_ok_and(|m| !m.is_file() || m.len() > 0) {
            return Err(OutputError::ReportReplacesUserFile {
                flag: flag.to_string(),
                dir: quote(dir),
                file: quote(&file.display().to_string()),
            });
        }
    }
    Ok(())
}

fn reason(err: &std::io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// The folder a path's file lives in ("." for a bare name).
fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A path to compare with others, as the file system will resolve it when the file is written:
/// its longest existing ancestor canonical (symlinks followed, `..` as the folders have it), the
/// rest, which does not exist yet, joined with `.` and `..` resolved by name (`sub/../p.yaml` and
/// `link/p.yaml`, `link` pointing to `.`, are both `./p.yaml`). `None` when the working directory
/// cannot be read.
fn identity(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let (existing, rest) = absolute.ancestors().find_map(|ancestor| {
        let canonical = ancestor.canonicalize().ok()?;
        Some((canonical, absolute.strip_prefix(ancestor).ok()?))
    })?;
    let mut out = existing;
    for part in rest.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(name) => out.push(name),
            _ => {}
        }
    }
    Some(out)
}

/// The flag of the first of `inputs` (flag, path, or `@path` as `--megatron-args` takes it) that
/// names the same file as `output`; names that are not existing files are skipped.
fn input_named<'a>(output: &Path, inputs: &[(&'a str, &str)]) -> Option<&'a str> {
    let output = identity(output)?;
    inputs.iter().find_map(|(input_flag, input)| {
        let input = input.strip_prefix('@').unwrap_or(input);
        let same = Path::new(input)
            .canonicalize()
            .is_ok_and(|input_identity| input_identity == output);
        same.then_some(*input_flag)
    })
}

/// Refuses an output `path` (given with `flag`) that names the same file as one of `inputs`
/// (flag, path or bundled name; names that are not files are skipped).
pub fn refuse_input_overlap(
    flag: &str,
    path: &str,
    inputs: &[(&str, &str)],
) -> Result<(), OutputError> {
    match input_named(Path::new(path), inputs) {
        Some(input_flag) => Err(OutputError::IsInput {
            flag: flag.to_string(),
            path: quote(path),
            input_flag: input_flag.to_string(),
        }),
        None => Ok(()),
    }
}

/// Refuses a report directory `dir` (given with `flag`) where one of the report's file `names`
/// would replace one of `inputs` (`eval --plan rep/report.json --report rep`).
pub fn refuse_report_overlap<S: AsRef<str>>(
    flag: &str,
    dir: &str,
    names: &[S],
    inputs: &[(&str, &str)],
) -> Result<(), OutputError> {
    for name in names {
        let file = Path::new(dir).join(name.as_ref());
        if let Some(input_flag) = input_named(&file, inputs) {
            return Err(OutputError::ReportReplacesInput {
                flag: flag.to_string(),
                dir: quote(dir),
                file: quote(&file.display().to_string()),
                input_flag: input_flag.to_string(),
            });
        }
    }
    Ok(())
}

/// Refuses an output file `path` (given with `flag`) that is one of the files `names` a report
/// written into `dir` (given with `report_flag`) writes (`plan --save rep/report.json --report
/// rep`): the second write would replace the first. Compared as [`refuse_input_overlap`] compares,
/// as resolved paths (see [`identity`]), since neither file need exist yet.
pub fn refuse_report_output_overlap<S: AsRef<str>>(
    flag: &str,
    path: &str,
    report_flag: &str,
    dir: &str,
    names: &[S],
) -> Result<(), OutputError> {
    // `--save x --report x` (or `--report x/sub`, `sub/../x`, `link-to-here/x`): the file takes
    // the name the directory needs.
    if let (Some(file), Some(report_dir)) = (identity(Path::new(path)), identity(Path::new(dir)))
        && report_dir.starts_with(&file)
    {
        return Err(OutputError::FileIsReportDir {
            flag: flag.to_string(),
            path: quote(path),
            report: format!("{report_flag} {}", quote(dir)),
        });
    }
    let Some(output) = identity(Path::new(path)) else {
        return Ok(());
    };
    for name in names {
        let file = Path::new(dir).join(name.as_ref());
        if identity(&file).is_some_and(|report_file| report_file == output) {
            return Err(OutputError::ReportReplacesOutput {
                flag: flag.to_string(),
                path: quote(path),
                file: quote(&file.display().to_string()),
                report: format!("{report_flag} {}", quote(dir)),
                example: quote(&Path::new(dir).join("plan.yaml").display().to_string()),
            });
        }
    }
    Ok(())
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Creates a new, empty temporary file in `folder`, named after `stem`, with `O_EXCL`.
fn create_temp(folder: &Path, stem: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    let pid = std::process::id();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let candidate = folder.join(format!(".{stem}.tpsim-{pid}-{n}.tmp"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&candidate)
        {
            Ok(file) => return Ok((candidate, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1_000_000 => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Checks, before any work, that `path` can be written by [`write_file`]: not empty, not a
/// directory or other non-regular file, not a file of the user's ([`OutputKind`]), in an existing
/// folder where a file can be created (tested with a temporary file of tpsim's own, removed at
/// once). Leaves nothing behind.
pub fn check_file(
    flag: &str,
    path: &str,
    example: &str,
    kind: OutputKind,
) -> Result<(), OutputError> {
    if path.trim().is_empty() {
        return Err(OutputError::Empty {
            flag: flag.to_string(),
            what: "file name",
            example: example.to_string(),
        });
    }
    if path == "-" {
        return Err(OutputError::Dash {
            flag: flag.to_string(),
            what: "file",
            example: example.to_string(),
        });
    }
    let target = Path::new(path);
    // A name whose extension says another format would hold something its name denies
    // (`--save out.json` getting YAML).
    if let (Some((_, expected)), Some(extension)) = (
        kind.format(),
        target.extension().map(|e| e.to_string_lossy().into_owned()),
    ) && !expected.iter().any(|e| extension.eq_ignore_ascii_case(e))
    {
        return Err(OutputError::WrongExtension {
            flag: flag.to_string(),
            path: quote(path),
            kind,
            extension,
            example: example.to_string(),
        });
    }
    if let Ok(metadata) = std::fs::metadata(target) {
        if metadata.is_dir() {
            return Err(OutputError::IsDirectory {
                flag: flag.to_string(),
                path: quote(path),
            });
        }
        if !metadata.is_file() {
            return Err(OutputError::NotRegular {
                flag: flag.to_string(),
                path: quote(path),
            });
        }
        refuse_foreign_file(flag, path, kind)?;
    }
    let folder = folder_of(&resolved(target));
    if folder.exists() && !folder.is_dir() {
        return Err(OutputError::FolderIsFile {
            flag: flag.to_string(),
            path: quote(path),
            folder: quote(&folder.display().to_string()),
        });
    }
    if !folder.is_dir() {
        // A folder that is a link leading nowhere (`--save deadlink/p.yaml`): "does not exist;
        // create it" would name neither the link nor where it points, as the report directory's
        // check names them.
        if let Some((link, target)) = dangling_link(&folder) {
            return Err(OutputError::FolderLinkBroken {
                flag: flag.to_string(),
                path: quote(path),
                link,
                target,
            });
        }
        return Err(OutputError::NoFolder {
            flag: flag.to_string(),
            path: quote(path),
            folder: quote(&folder.display().to_string()),
        });
    }
    let stem = file_stem(target);
    match create_temp(&folder, &stem) {
        Ok((probe, file)) => {
            drop(file);
            let _ = std::fs::remove_file(probe);
            Ok(())
        }
        Err(err) => Err(OutputError::NotWritable {
            flag: flag.to_string(),
            path: quote(path),
            reason: reason(&err),
        }),
    }
}

/// The file a symlink points to (so that writing keeps the link), or the path itself. A link to a
/// file that does not exist yet is followed by hand, as a shell's `>` follows it: the file is
/// created where the link points and the link stays.
fn resolved(path: &Path) -> PathBuf {
    let is_link = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link(path) {
        return path.to_path_buf();
    }
    if let Ok(target) = path.canonicalize() {
        return target;
    }
    // Dangling: follow each link (relative targets from the link's own folder), at most as many
    // hops as Linux allows (`MAXSYMLINKS`, 40).
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        if !is_link(&current) {
            return current;
        }
        let Ok(next) = std::fs::read_link(&current) else {
            break;
        };
        current = folder_of(&current).join(next);
    }
    path.to_path_buf()
}

fn file_stem(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().chars().take(40).collect::<String>())
        .unwrap_or_else(|| "output".to_string())
}

/// What a written-to message adds when `path` already holds a file, said before it is written:
/// `write_file` and `write_report_dir` replace only tpsim's own earlier outputs (`OutputKind`,
/// `refuse_foreign_report_files`), and the user is told that one was replaced. "" otherwise.
pub fn replacing_words(path: &Path, what: &str) -> String {
    if path.exists() {
        format!(", replacing the {what} tpsim wrote there before")
    } else {
        String::new()
    }
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, synced, then renamed over it.
/// An existing file keeps its permissions. On failure nothing is left behind and the old file (if
/// any) is untouched.
pub fn write_file(
    flag: &str,
    path: &str,
    bytes: &[u8],
    kind: OutputKind,
) -> Result<(), OutputError> {
    check_file(flag, path, "out.yaml", kind)?;
    let target = resolved(Path::new(path));
    let folder = folder_of(&target);
    let fail = |err: std::io::Error| OutputError::NotWritable {
        flag: flag.to_string(),
        path: quote(path),
        reason: reason(&err),
    };
    let (temp, mut file) = create_temp(&folder, &file_stem(&target)).map_err(fail)?;
    let result = (|| {
        file.write_all(bytes)?;
        if let Ok(old) = std::fs::metadata(&target) {
            file.set_permissions(old.permissions())?;
        }
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, &target)
    })();
    if let Err(err) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(fail(err));
    }
    Ok(())
}

/// The first of `path` and its ancestors that is a symlink leading nowhere (dangling, or a loop),
/// quoted, with where it points.
fn dangling_link(path: &Path) -> Option<(String, String)> {
    let link = path.ancestors().find(|a| {
        !a.as_os_str().is_empty()
            && std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink())
            && std::fs::metadata(a).is_err()
    })?;
    let target = std::fs::read_link(link)
        .map(|t| t.display().to_string())
        .unwrap_or_default();
    Some((quote(&link.display().to_string()), quote(&target)))
}

/// The nearest existing ancestor of `path` (".", when none of it exists yet).
fn existing_ancestor(path: &Path) -> PathBuf {
    let mut current = folder_of(path);
    loop {
        if std::fs::metadata(&current).is_ok() {
            return current;
        }
        match current.parent() {
            Some(p) if !p.as_os_str().is_empty() => current = p.to_path_buf(),
            _ => return PathBuf::from("."),
        }
    }
}

/// Where a report directory will go, checked before any work: the directory (or, when it does not
/// exist yet, its nearest existing ancestor, under which the missing folders will be created) must
/// be a writable directory.
pub fn check_report_dir(flag: &str, dir: &str) -> Result<(), OutputError> {
    if dir.is_empty() {
        return Err(OutputError::Empty {
            flag: flag.to_string(),
            what: "directory",
            example: "reports/mine".to_string(),
        });
    }
    if dir == "-" {
        return Err(OutputError::Dash {
            flag: flag.to_string(),
            what: "directory",
            example: "reports/mine".to_string(),
        });
    }
    let path = Path::new(dir);
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => probe_folder(flag, dir, path),
        Ok(_) => Err(OutputError::ReportIsFile {
            flag: flag.to_string(),
            path: quote(dir),
        }),
        Err(_) => {
            // A link on the way that leads nowhere (`--out link/rep`, `link` dangling or a loop):
            // creating the directory fails with "File exists", which names neither the link nor
            // what is missing.
            if let Some((link, target)) = dangling_link(path) {
                return Err(OutputError::BrokenLink {
                    flag: flag.to_string(),
                    path: quote(dir),
                    link,
                    target,
                });
            }
            let ancestor = existing_ancestor(path);
            if !ancestor.is_dir() {
                return Err(OutputError::CannotCreate {
                    flag: flag.to_string(),
                    path: quote(dir),
                    folder: quote(&ancestor.display().to_string()),
                });
            }
            probe_folder(flag, dir, &ancestor)
        }
    }
}

fn probe_folder(flag: &str, dir: &str, folder: &Path) -> Result<(), OutputError> {
    match create_temp(folder, "report") {
        Ok((probe, file)) => {
            drop(file);
            let _ = std::fs::remove_file(probe);
            Ok(())
        }
        Err(err) => Err(OutputError::NotWritable {
            flag: flag.to_string(),
            path: quote(dir),
            reason: reason(&err),
        }),
    }
}

/// Writes the report `files` (name, text) into `dir`. A new directory is built under a temporary
/// name beside it and renamed into place once complete, so a failure leaves no directory behind;
/// into an existing directory each file is written atomically, and files tpsim did not write there
/// are left alone. A file that would replace one of `inputs` is refused before anything is written.
pub fn write_report_dir(
    flag: &str,
    dir: &str,
    files: &[(String, String)],
    inputs: &[(&str, &str)],
) -> Result<(), OutputError> {
    check_report_dir(flag, dir)?;
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    refuse_report_overlap(flag, dir, &names, inputs)?;
    let path = Path::new(dir);
    let fail = |err: std::io::Error| OutputError::NotWritable {
        flag: flag.to_string(),
        path: quote(dir),
        reason: reason(&err),
    };
    if path.is_dir() {
        refuse_foreign_report_files(flag, dir, &names)?;
        for (name, text) in files {
            let file = path.join(name);
            write_file(
                flag,
                &file.to_string_lossy(),
                text.as_bytes(),
                OutputKind::ReportFile,
            )?;
        }
        return Ok(());
    }
    // Missing parent folders are created, and removed again if the report fails.
    let parent = folder_of(path);
    let mut created: Vec<PathBuf> = Vec::new();
    let mut missing: Vec<PathBuf> = Vec::new();
    let mut current = parent.clone();
    while std::fs::metadata(&current).is_err() {
        missing.push(current.clone());
        match current.parent() {
            Some(p) if !p.as_os_str().is_empty() => current = p.to_path_buf(),
            _ => break,
        }
    }
    let remove_created = |created: &[PathBuf]| {
        for folder in created.iter().rev() {
            let _ = std::fs::remove_dir(folder);
        }
    };
    for folder in missing.iter().rev() {
        if let Err(err) = std::fs::create_dir(folder) {
            remove_created(&created);
            return Err(fail(err));
        }
        created.push(folder.clone());
    }
    let stem = file_stem(path);
    let staging = {
        let pid = std::process::id();
        let mut n = COUNTER.fetch_add(1, Ordering::Relaxed);
        loop {
            let candidate = parent.join(format!(".{stem}.tpsim-{pid}-{n}.tmp"));
            match std::fs::create_dir(&candidate) {
                Ok(()) => break candidate,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1_000_000 => {
                    n = COUNTER.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    remove_created(&created);
                    return Err(fail(e));
                }
            }
        }
    };
    let result = (|| {
        for (name, text) in files {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(staging.join(name))?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
        }
        std::fs::rename(&staging, path)
    })();
    if let Err(err) = result {
        // Only what this call created: the staging folder and the files written into it.
        for (name, _) in files {
            let _ = std::fs::remove_file(staging.join(name));
        }
        let _ = std::fs::remove_dir(&staging);
        remove_created(&created);
        return Err(fail(err));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tpsim-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_write_replaces_the_file_and_leaves_no_temporary() {
        let dir = scratch("replace");
        let target = dir.join("old.yaml");
        std::fs::write(&target, "old").unwrap();
        std::fs::write(&target, "# Written by `tpsim plan`; old").unwrap();
        write_file("--save", target.to_str().unwrap(), b"new", OutputKind::Plan).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(listing(&dir), vec!["old.yaml"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_write_through_a_dangling_link_creates_its_target_and_keeps_the_link() {
        let dir = scratch("dangling");
        let link = dir.join("plan.yaml");
        std::os::unix::fs::symlink("real/plan.yaml", &link).unwrap();
        std::fs::create_dir(dir.join("real")).unwrap();
        write_file("--save", link.to_str().unwrap(), b"new", OutputKind::Plan).unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("real/plan.yaml")).unwrap(),
            "new"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn checks_leave_a_user_file_named_like_a_probe_alone() {
        let dir = scratch("probe");
        std::fs::write(dir.join(".tpsim-write-check"), "mine").unwrap();
        check_report_dir("--report", dir.to_str().unwrap()).unwrap();
        check_file(
            "--save",
            dir.join("x.yaml").to_str().unwrap(),
            "x.yaml",
            OutputKind::Plan,
        )
        .unwrap();
        assert_eq!(listing(&dir), vec![".tpsim-write-check"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_output_that_is_an_input_is_refused() {
        let dir = scratch("overlap");
        let model = dir.join("m.yaml");
        std::fs::write(&model, "x").unwrap();
        let same = format!("{}/./m.yaml", dir.display());
        let err = refuse_input_overlap("--save", &same, &[("--model", model.to_str().unwrap())])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--model"), "{err}");
        refuse_input_overlap(
            "--save",
            dir.join("n.yaml").to_str().unwrap(),
            &[("--model", model.to_str().unwrap())],
        )
        .unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_report_file_that_is_an_input_is_refused_and_left_alone() {
        let dir = scratch("report-overlap");
        let plan = dir.join("report.json");
        std::fs::write(&plan, "mine").unwrap();
        let files = vec![
            ("index.html".to_string(), "a".to_string()),
            ("report.json".to_string(), "b".to_string()),
        ];
        let err = write_report_dir(
            "--report",
            dir.to_str().unwrap(),
            &files,
            &[("--plan", plan.to_str().unwrap())],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("report.json") && err.contains("--plan"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&plan).unwrap(), "mine");
        assert_eq!(listing(&dir), vec!["report.json"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_new_report_dir_appears_whole() {
        let dir = scratch("report");
        let report = dir.join("rep");
        let files = vec![
            ("a.html".to_string(), "a".to_string()),
            ("b.svg".to_string(), "b".to_string()),
        ];
        write_report_dir("--report", report.to_str().unwrap(), &files, &[]).unwrap();
        assert_eq!(listing(&report), vec!["a.html", "b.svg"]);
        assert_eq!(listing(&dir), vec!["rep"]);
        let nested = dir.join("a/b/rep");
        write_report_dir("--report", nested.to_str().unwrap(), &files, &[]).unwrap();
        assert_eq!(listing(&nested), vec!["a.html", "b.svg"]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
