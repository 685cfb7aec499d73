//! The pseudo file system (RFC 8881 section 7.3): the directories that join the exports'
//! paths, so that a client mounting `/` sees every export below it. A server whose only
//! export is `/` (`granary serve DIR`) has no pseudo directories: `/` is the export.
//!
//! Pseudo directories are read-only and belong to root; their handles are
//! [`PSEUDO_HANDLE_BYTES`] long (real handles are `vfs::handle::HANDLE_BYTES`), start
//! with a fixed tag and name a node by index. They grant nothing: listing one shows only
//! export names, and crossing into an export goes through the export's own checks.

use std::sync::Arc;

use vfs::{Export, ExportTable};

/// Tag of a pseudo directory's handle.
const TAG: &[u8; 12] = b"granary-psfs";

/// Length of a pseudo directory's handle: the tag and a node index.
pub const PSEUDO_HANDLE_BYTES: usize = 16;

const _: () = assert!(PSEUDO_HANDLE_BYTES != vfs::handle::HANDLE_BYTES);

/// Where a pseudo node leads.
#[derive(Debug, Clone)]
pub enum Child {
    Pseudo(u32),
    Export(Arc<Export>),
}

#[derive(Debug)]
struct Node {
    parent: u32,
    children: Vec<(Vec<u8>, Child)>,
}

/// The pseudo directories of a server.
#[derive(Debug)]
pub struct Pseudo {
    nodes: Vec<Node>,
    /// The export at `/`, when there is one (then there are no pseudo nodes).
    root_export: Option<Arc<Export>>,
}

impl Pseudo {
    #[must_use]
    pub fn new(exports: &ExportTable) -> Self {
        let mut p = Self {
            nodes: vec![Node {
                parent: 0,
                children: Vec::new(),
            }],
            root_export: None,
        };
        for export in exports.iter() {
            let comps: Vec<&str> = export.path.split('/').filter(|c| !c.is_empty()).collect();
            if comps.is_empty() {
                p.root_export = Some(Arc::clone(export));
                continue;
            }
            let mut at = 0u32;
            for (i, c) in comps.iter().enumerate() {
                let last = i + 1 == comps.len();
                let found = p.nodes[at as usize]
                    .children
                    .iter()
                    .find(|(n, _)| n == c.as_bytes())
                    .map(|(_, ch)| ch.clone());
                match (found, last) {
                    (Some(Child::Pseudo(n)), false) => at = n,
                    (Some(_), _) => break, // an export already there: nested exports are reached through it
                    (None, true) => p.nodes[at as usize]
                        .children
                        .push((c.as_bytes().to_vec(), Child::Export(Arc::clone(export)))),
                    (None, false) => {
                        let n = u32::try_from(p.nodes.len()).unwrap_or(u32::MAX);
                        p.nodes.push(Node {
                            parent: at,
                            children: Vec::new(),
                        });
                        p.nodes[at as usize]
                            .children
                            .push((c.as_bytes().to_vec(), Child::Pseudo(n)));
                        at = n;
                    }
                }
            }
        }
        p
    }

    /// The export at `/`, if the server has one (then PUTROOTFH is that export's root).
    #[must_use]
    pub fn root_export(&self) -> Option<&Arc<Export>> {
        self.root_export.as_ref()
    }

    /// The handle of pseudo node `n`.
    #[must_use]
    pub fn handle(n: u32) -> bytes::Bytes {
        let mut h = Vec::with_capacity(PSEUDO_HANDLE_BYTES);
        h.extend_from_slice(TAG);
        h.extend_from_slice(&n.to_be_bytes());
        bytes::Bytes::from(h)
    }

    /// The node a handle names, if it is a pseudo handle of this server.
    #[must_use]
    pub fn parse(&self, raw: &[u8]) -> Option<u32> {
        if raw.len() != PSEUDO_HANDLE_BYTES || &raw[..TAG.len()] != TAG {
            return None;
        }
        let n = u32::from_be_bytes(raw[TAG.len()..].try_into().ok()?);
        ((n as usize) < self.nodes.len() && self.root_export.is_none()).then_some(n)
    }

    /// The entry `name` of node `n`.
    #[must_use]
    pub fn lookup(&self, n: u32, name: &[u8]) -> Option<Child> {
        self.nodes
            .get(n as usize)?
            .children
            .iter()
            .find(|(c, _)| c == name)
            .map(|(_, ch)| ch.clone())
    }

    /// The parent of node `n` (the root is its own parent).
    #[must_use]
    pub fn parent(&self, n: u32) -> u32 {
        self.nodes.get(n as usize).map_or(0, |node| node.parent)
    }

    /// The pseudo node an export's root sits in, and the export's name there.
    #[must_use]
    pub fn parent_of_export(&self, export: &Export) -> Option<u32> {
        self.nodes.iter().enumerate().find_map(|(i, node)| {
            node.children
                .iter()
                .any(|(_, ch)| matches!(ch, Child::Export(e) if e.id == export.id))
                .then_some(i as u32)
        })
    }

    /// Node `n`'s entries.
    #[must_use]
    pub fn entries(&self, n: u32) -> &[(Vec<u8>, Child)] {
        self.nodes
            .get(n as usize)
            .map_or(&[], |node| &node.children)
    }

    /// The fileid pseudo node `n` reports: high values no backend uses for its root.
    #[must_use]
    pub fn fileid(n: u32) -> u64 {
        u64::MAX - u64::from(n)
    }
}
