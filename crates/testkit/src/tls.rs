//! Support for the TLS tests: a throwaway CA and server certificate made with `openssl`, a
//! private directory, free ports and server processes that are stopped when dropped. Anything
//! missing (a binary, a user) is reported as a reason to skip, never waited for.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A directory of the test's own, removed (with everything in it) when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(purpose: &str) -> std::io::Result<Self> {
        let path = std::env::temp_dir().join(format!("seckill-{purpose}-{}", crate::unique_tag()));
        std::fs::create_dir_all(&path)?;
        Ok(Self(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// PEM files in one directory: `ca.pem` signed `server.pem` (key `server.key`) for the name
/// `localhost` only, so connecting to `127.0.0.1` is a name mismatch; `other-ca.pem` signed
/// `other.pem` (key `other.key`), also for `localhost`, and is trusted by nobody.
pub struct Certs {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub other_ca: PathBuf,
    pub other_cert: PathBuf,
    pub other_key: PathBuf,
}

impl Certs {
    /// Makes them in `dir`; `Err` names what failed (`openssl` missing, say).
    pub fn create(dir: &Path) -> Result<Self, String> {
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=critical,CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .map_err(|e| e.to_string())?;
        for (ca, server) in [("ca", "server"), ("other-ca", "other")] {
            let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
            openssl(
                dir,
                &[
                    &["req", "-x509"],
                    &ec[..],
                    &[
                        "-keyout",
                        &format!("{ca}.key"),
                        "-out",
                        &format!("{ca}.pem"),
                        "-days",
                        "2",
                        "-subj",
                        &format!("/CN=seckill test {ca}"),
                    ],
                ]
                .concat(),
            )?;
            openssl(
                dir,
                &[
                    &["req", "-new"],
                    &ec[..],
                    &[
                        "-keyout",
                        &format!("{server}.key"),
                        "-out",
                        &format!("{server}.csr"),
                        "-subj",
                        "/CN=localhost",
                    ],
                ]
                .concat(),
            )?;
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{server}.csr"),
                    "-CA",
                    &format!("{ca}.pem"),
                    "-CAkey",
                    &format!("{ca}.key"),
                    "-CAcreateserial",
                    "-out",
                    &format!("{server}.pem"),
                    "-days",
                    "2",
                    "-extfile",
                    "server.ext",
                ],
            )?;
        }
        Ok(Self::at(dir))
    }

    /// The paths of the files [`Certs::create`] made in `dir`.
    pub fn at(dir: &Path) -> Self {
        Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
            other_ca: dir.join("other-ca.pem"),
            other_cert: dir.join("other.pem"),
            other_key: dir.join("other.key"),
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cannot run openssl: {e}"))?;
    if !out.status.success() {
        return Err(format!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// A port nothing listens on right now (the OS's pick, released at once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// `name` in a `PATH` directory.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// A server process, stopped when dropped: asked first (`signal`, so PostgreSQL shuts down
/// fast and cleanly), killed after five seconds.
pub struct ServerProcess {
    child: Child,
    signal: &'static str,
    log: PathBuf,
}

impl ServerProcess {
    /// Starts `command` with its output in `log`.
    pub fn spawn(mut command: Command, signal: &'static str, log: PathBuf) -> Result<Self, String> {
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {command:?}: {e}"))?;
        Ok(Self { child, signal, log })
    }

    /// Its output so far (to explain a failure).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `Some(status)` once it has exited (a server that refused its options).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.exited().is_some() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-s", self.signal, &self.child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
