//! Interfaces, addresses, routes and sysctls inside one of the sandbox's network namespaces,
//! through rtnetlink (the rust-netlink crates): a netlink socket opened inside a namespace
//! configures that namespace from anywhere, so the sandbox needs no `ip` process per change, and
//! a veth end moves into another namespace by its descriptor, with no name to look up.

use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt as _;
use rtnetlink::packet_route::route::RouteScope;
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};
use tokio::task::JoinHandle;

use super::netns::Netns;
use crate::error::{Error, Result};
use crate::real::addresses::Cidr;

/// A netlink connection into one namespace; closed when dropped.
pub struct Links {
    netns: Netns,
    handle: Handle,
    /// The connection's task: it would outlive every handle (it also waits for unsolicited
    /// messages), and its socket would hold the namespace, so it is ended with this.
    connection: JoinHandle<()>,
}

impl Drop for Links {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl Links {
    /// Opens a connection into `netns`; the caller must be inside a tokio runtime.
    pub fn open(netns: &Netns) -> Result<Links> {
        let runtime = tokio::runtime::Handle::current();
        let (connection, handle, _) = netns.run("opening a netlink connection", || {
            let _entered = runtime.enter();
            rtnetlink::new_connection()
        })?;
        Ok(Links {
            netns: netns.clone(),
            handle,
            connection: tokio::spawn(connection),
        })
    }

    fn failed(&self, what: String) -> impl FnOnce(rtnetlink::Error) -> Error + use<> {
        let what = format!("{what} in the network namespace of {}", self.netns.name());
        move |source| Error::Netlink { what, source }
    }

    /// The index of interface `name`.
    pub async fn index(&self, name: &str) -> Result<u32> {
        let found = self
            .handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute()
            .try_next()
            .await
            .map_err(self.failed(format!("looking up interface {name}")))?;
        found
            .map(|link| link.header.index)
            .ok_or_else(|| Error::Io {
                what: format!(
                    "looking up interface {name} in the network namespace of {}",
                    self.netns.name()
                ),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            })
    }

    /// Brings interface `name` up.
    pub async fn up(&self, name: &str) -> Result<()> {
        let index = self.index(name).await?;
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(self.failed(format!("bringing {name} up")))
    }

    /// A veth pair: `name` here, `peer` moved into `other` (keeping its name, so no two
    /// namespaces ever rename into one another's).
    pub async fn add_veth(&self, name: &str, peer: &str, other: &Netns) -> Result<()> {
        self.handle
            .link()
            .add(LinkVeth::new(name, peer).build())
            .execute()
            .await
            .map_err(self.failed(format!("creating the veth pair {name}/{peer}")))?;
        let index = self.index(peer).await?;
        use std::os::fd::AsRawFd as _;
        self.handle
            .link()
            .set(
                LinkUnspec::new_with_index(index)
                    .setns_by_fd(other.fd().as_raw_fd())
                    .build(),
            )
            .execute()
            .await
            .map_err(self.failed(format!(
                "moving {peer} into the network namespace of {}",
                other.name()
            )))
    }

    /// Deletes interface `name` (a veth takes its peer with it); gone already is fine.
    pub async fn delete(&self, name: &str) -> Result<()> {
        let Ok(index) = self.index(name).await else {
            return Ok(());
        };
        self.handle
            .link()
            .del(index)
            .execute()
            .await
            .map_err(self.failed(format!("deleting {name}")))
    }

    /// `address/prefix` on interface `name`.
    pub async fn add_address(&self, name: &str, address: Ipv4Addr, prefix: u8) -> Result<()> {
        let index = self.index(name).await?;
        self.handle
            .address()
            .add(index, IpAddr::V4(address), prefix)
            .execute()
            .await
            .map_err(self.failed(format!("adding {address}/{prefix} to {name}")))
    }

    /// A route to `destination` through interface `name`: via `gateway` (reached on the link
    /// even outside the interface's own subnet, `onlink`), or straight onto the link.
    pub async fn add_route(
        &self,
        destination: Cidr,
        gateway: Option<Ipv4Addr>,
        name: &str,
    ) -> Result<()> {
        let index = self.index(name).await?;
        let mut route = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(destination.address, destination.prefix)
            .output_interface(index);
        route = match gateway {
            Some(gateway) => route.gateway(gateway).onlink(),
            None => route.scope(RouteScope::Link),
        };
        self.handle
            .route()
            .add(route.build())
            .execute()
            .await
            .map_err(self.failed(format!(
                "adding the route to {destination} via {name}{}",
                gateway.map(|g| format!(" and {g}")).unwrap_or_default()
            )))
    }
}

/// Writes `value` to `/proc/sys/<key>` inside `netns` (a `net.*` sysctl is per namespace).
pub fn sysctl(netns: &Netns, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    netns.run(&format!("setting {key}={value}"), || {
        std::fs::write(&path, value)
    })
}
