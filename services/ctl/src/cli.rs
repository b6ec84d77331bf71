//! The command line: `overcastctl [--endpoint E] [-o table|json] [-q] <group> <command>`.

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "overcastctl",
    version,
    about = "Speak CSI to any driver's Unix socket"
)]
pub struct Cli {
    /// The driver's socket.
    #[arg(
        long,
        short = 'e',
        env = "CSI_ENDPOINT",
        default_value = "unix:///csi/csi.sock",
        global = true
    )]
    pub endpoint: String,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "table", global = true)]
    pub output: Output,
    /// Print only the essential value (a volume id, a publish context as k=v words).
    #[arg(long, short = 'q', global = true)]
    pub quiet: bool,
    /// Give up on a call after this many seconds.
    #[arg(long, default_value_t = 120, global = true)]
    pub timeout: u64,
    #[command(subcommand)]
    pub group: Group,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Group {
    /// Identity service.
    #[command(subcommand)]
    Identity(IdentityCmd),
    /// Controller service.
    #[command(subcommand)]
    Controller(ControllerCmd),
    /// Node service.
    #[command(subcommand)]
    Node(NodeCmd),
}

#[derive(Debug, Subcommand)]
pub enum IdentityCmd {
    /// Driver name and version.
    Info,
    /// Plugin capabilities.
    Capabilities,
    /// Readiness.
    Probe,
}

/// How a volume is to be used.
#[derive(Debug, Clone, Args)]
pub struct Usage {
    /// A raw block volume instead of a filesystem.
    #[arg(long, conflicts_with = "fs")]
    pub block: bool,
    /// Filesystem of a mount volume.
    #[arg(long)]
    pub fs: Option<String>,
    /// Access mode.
    #[arg(long, value_enum, default_value = "single-node-writer")]
    pub access_mode: AccessMode,
    /// Mount flags (repeatable).
    #[arg(long = "mount-flag")]
    pub mount_flags: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AccessMode {
    SingleNodeWriter,
    SingleNodeReaderOnly,
    SingleNodeSingleWriter,
    SingleNodeMultiWriter,
    MultiNodeReaderOnly,
    MultiNodeSingleWriter,
    MultiNodeMultiWriter,
}

#[derive(Debug, Subcommand)]
pub enum ControllerCmd {
    /// Create a volume (idempotent by name).
    Create {
        name: String,
        /// Required size: bytes, or with a unit (16Mi, 1Gi, 500M).
        #[arg(long)]
        size: Option<String>,
        /// Largest acceptable size.
        #[arg(long)]
        limit: Option<String>,
        /// StorageClass-style parameter key=value (repeatable).
        #[arg(long = "param")]
        params: Vec<String>,
        /// Require this zone (topology.kubernetes.io/zone).
        #[arg(long)]
        zone: Option<String>,
        /// Require this region (topology.kubernetes.io/region).
        #[arg(long)]
        region: Option<String>,
        #[command(flatten)]
        usage: Usage,
    },
    /// Delete a volume.
    Delete { volume_id: String },
    /// List volumes (one page with --max).
    List {
        #[arg(long, default_value_t = 0)]
        max: i32,
        #[arg(long, default_value = "")]
        token: String,
    },
    /// One volume with its published nodes and condition.
    Get { volume_id: String },
    /// Attach a volume to a node.
    Publish {
        volume_id: String,
        #[arg(long)]
        node: String,
        #[arg(long)]
        readonly: bool,
        #[command(flatten)]
        usage: Usage,
    },
    /// Detach a volume from a node (from every node without --node).
    Unpublish {
        volume_id: String,
        #[arg(long, default_value = "")]
        node: String,
    },
    /// Grow a volume.
    Expand {
        volume_id: String,
        #[arg(long)]
        size: String,
        #[command(flatten)]
        usage: Usage,
    },
    /// Capacity available (in a topology segment).
    Capacity {
        #[arg(long)]
        zone: Option<String>,
        #[arg(long)]
        region: Option<String>,
        #[arg(long = "param")]
        params: Vec<String>,
    },
    /// Controller capabilities.
    Capabilities,
}

#[derive(Debug, Subcommand)]
pub enum NodeCmd {
    /// Node id, attach limit and topology.
    Info,
    /// Node capabilities.
    Capabilities,
    /// Format (if blank) and mount a published volume at a staging path.
    Stage {
        volume_id: String,
        #[arg(long)]
        staging: String,
        /// Publish context key=value, as `controller publish` printed it (repeatable).
        #[arg(long = "context", num_args = 1..)]
        context: Vec<String>,
        #[command(flatten)]
        usage: Usage,
    },
    /// Unmount a staged volume.
    Unstage {
        volume_id: String,
        #[arg(long)]
        staging: String,
    },
    /// Bind a staged volume into a target path.
    Publish {
        volume_id: String,
        #[arg(long)]
        staging: String,
        #[arg(long)]
        target: String,
        #[arg(long)]
        readonly: bool,
        #[arg(long = "context", num_args = 1..)]
        context: Vec<String>,
        #[command(flatten)]
        usage: Usage,
    },
    /// Remove a volume from a target path.
    Unpublish {
        volume_id: String,
        #[arg(long)]
        target: String,
    },
    /// Usage and condition of a staged or published volume.
    Stats {
        volume_id: String,
        #[arg(long)]
        path: String,
    },
    /// Grow the filesystem of a published volume.
    Expand {
        volume_id: String,
        #[arg(long)]
        path: String,
        #[arg(long)]
        size: Option<String>,
        #[arg(long, default_value = "")]
        staging: String,
        #[command(flatten)]
        usage: Usage,
    },
}
