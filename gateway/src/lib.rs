//! The NFS gateway: NFSv3 and MOUNT programs over the engine's transports, served from
//! an object-store backend through the file model.

pub mod audit;
pub mod backend;
pub mod cache;
pub mod call;
pub mod cli;
pub mod config;
pub mod conn;
pub mod ddp;
pub mod effective;
pub mod export;
pub mod fence;
pub mod front;
pub mod fs;
pub mod ha;
pub mod limits;
pub mod mount;
pub mod nfs3;
pub mod nfs4;
pub mod outcome;
pub mod qos;
pub mod reload;
pub mod sdnotify;
pub mod server;
pub mod state;
pub mod stats;
pub mod supervise;
pub mod ulb;
pub mod uring;
