//! The server address line: `granary serve` prints
//! `nfs://127.0.0.1/?version=3&nfsport=PORT&mountport=PORT` (RFC 2224 style), and tests
//! that start it read the ports back from that line.

use std::net::{IpAddr, SocketAddr};

/// Where a server's NFS and MOUNT programs listen, and the export the URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAddrs {
    pub nfs: SocketAddr,
    pub mount: SocketAddr,
    /// Where NLM listens when not on the NFS port (`nlmport=`: nfs-ganesha's own port).
    pub nlm: Option<SocketAddr>,
    /// The URL's path (`/` when it has none), as written: percent-escapes are not decoded.
    pub export_path: String,
}

impl ServerAddrs {
    /// Finds an `nfs://HOST/PATH?...` URL anywhere in `text` (a log line, say). HOST is an
    /// IP address (`[...]` for IPv6); `nfsport` is required; `mountport` defaults to it;
    /// `nlmport` (not libnfs's: granary bench's, for a server whose NLM has a port of its
    /// own) is optional; `version`, if present, must be 3; other parameters are ignored.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let url = &text[text.find("nfs://")? + "nfs://".len()..];
        let url = url.split_whitespace().next()?;
        let (host, rest) = url.split_at(url.find('/')?);
        let ip: IpAddr = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .parse()
            .ok()?;
        let (path, query) = rest.split_once('?')?;
        let (mut nfs_port, mut mount_port, mut nlm_port) = (None, None, None);
        for pair in query.split('&') {
            match pair.split_once('=')? {
                ("version", v) if v != "3" => return None,
                ("nfsport", p) => nfs_port = Some(p.parse::<u16>().ok()?),
                ("mountport", p) => mount_port = Some(p.parse::<u16>().ok()?),
                ("nlmport", p) => nlm_port = Some(p.parse::<u16>().ok()?),
                _ => {}
            }
        }
        let nfs_port = nfs_port?;
        Some(Self {
            nfs: SocketAddr::new(ip, nfs_port),
            mount: SocketAddr::new(ip, mount_port.unwrap_or(nfs_port)),
            nlm: nlm_port.map(|p| SocketAddr::new(ip, p)),
            export_path: path.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_serve_line() {
        let line = "listening on nfs://127.0.0.1/?version=3&nfsport=2049&mountport=20048 (mem)";
        let addrs = ServerAddrs::parse(line).unwrap();
        assert_eq!(addrs.nfs, "127.0.0.1:2049".parse().unwrap());
        assert_eq!(addrs.mount, "127.0.0.1:20048".parse().unwrap());
        assert_eq!(addrs.export_path, "/");
    }

    #[test]
    fn export_path_and_extra_parameters() {
        let line =
            "    nfs://127.0.0.1/data/x?version=3&nfsport=5&mountport=5&auto-traverse-mounts=0";
        let addrs = ServerAddrs::parse(line).unwrap();
        assert_eq!(addrs.export_path, "/data/x");
        assert_eq!(addrs.mount.port(), 5);
        assert_eq!(addrs.nlm, None);
        let ganesha = ServerAddrs::parse("nfs://127.0.0.1/x?nfsport=5&mountport=6&nlmport=7")
            .expect("a URL with nlmport");
        assert_eq!(ganesha.nlm, Some("127.0.0.1:7".parse().unwrap()));
    }

    #[test]
    fn ipv6_and_missing_mountport() {
        let addrs = ServerAddrs::parse("nfs://[::1]/?nfsport=7").unwrap();
        assert_eq!(addrs.nfs, "[::1]:7".parse().unwrap());
        assert_eq!(addrs.mount, addrs.nfs);
    }

    #[test]
    fn refuses_other_versions_and_garbage() {
        assert_eq!(
            ServerAddrs::parse("nfs://127.0.0.1/?version=4&nfsport=1"),
            None
        );
        assert_eq!(ServerAddrs::parse("nfs://host/?nfsport=1"), None);
        assert_eq!(ServerAddrs::parse("no url here"), None);
    }
}
