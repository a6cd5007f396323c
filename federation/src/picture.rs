//! A picture of the federation: its layers, their Combs and every borrow edge, with phases and
//! via chains, as Graphviz DOT, Mermaid, or an HTML page that draws the edges in SVG. Pure: the
//! CLI (`comb graph`) and the admin address (`/`) read the Combs and hand them here.

use std::fmt::Write as _;

use comb_api::{Comb, CombStatus};

use crate::config::Config;

/// The federation as drawn: layers in the configuration's order (highest first, customarily),
/// each Comb once, and an edge from every borrowing Comb to what it borrows from.
#[derive(Clone, Debug, PartialEq)]
pub struct Picture {
    pub layers: Vec<LayerColumn>,
    pub edges: Vec<Edge>,
}

/// One layer: its Combs, or why they could not be read.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerColumn {
    pub name: String,
    pub context: String,
    pub combs: Vec<CombNode>,
    /// The layer could not be listed (its API server is down, say): drawn empty, with this.
    pub error: Option<String>,
}

/// One Comb as the picture shows it: what its status recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct CombNode {
    pub namespace: String,
    pub name: String,
    pub phase: Option<String>,
    pub reason: Option<String>,
    /// Its layer builds it as its class's stub.
    pub stub: bool,
    /// The kube context it borrows from (`status.upstream.context`), or its upstream class when
    /// that has no context (`Static`).
    pub upstream: Option<String>,
    /// `status.upstream.via`, nearest first.
    pub via: Vec<String>,
}

/// A Comb, by its layer's and its own index in [`Picture::layers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeId {
    pub layer: usize,
    pub comb: usize,
}

/// A borrowing Comb and what it borrows from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: NodeId,
    pub to: EdgeTarget,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EdgeTarget {
    /// The peer Comb in the upstream layer.
    Comb(NodeId),
    /// The upstream layer, where the peer is not (or not yet) listed.
    Layer(usize),
}

/// One layer as the picture is given it: its Combs, or why they could not be read (drawn as an
/// empty column saying so).
#[derive(Clone, Debug)]
pub enum LayerCombs {
    Read(Vec<Comb>),
    Unread(String),
}

impl Picture {
    /// The picture of `listed`: per layer of `config`, in its order, the Combs read from it or
    /// the reason they could not be.
    pub fn build(config: &Config, listed: &[LayerCombs]) -> Picture {
        let layers: Vec<LayerColumn> = config
            .layers
            .iter()
            .zip(listed)
            .map(|(layer, combs)| {
                let (combs, error) = match combs {
                    LayerCombs::Read(combs) => {
                        (combs.iter().map(|comb| node(layer, comb)).collect(), None)
                    }
                    LayerCombs::Unread(why) => (Vec::new(), Some(why.clone())),
                };
                LayerColumn {
                    name: layer.name.clone(),
                    context: layer.context.clone(),
                    combs,
                    error,
                }
            })
            .collect();
        let mut edges = Vec::new();
        for (layer_index, column) in layers.iter().enumerate() {
            for (comb_index, comb) in column.combs.iter().enumerate() {
                let Some(context) = comb.upstream.as_deref() else {
                    continue;
                };
                let Some((upstream, namespace)) =
                    upstream_layer(config, layer_index, context, &comb.namespace)
                else {
                    continue;
                };
                let peer = layers[upstream]
                    .combs
                    .iter()
                    .position(|peer| peer.name == comb.name && peer.namespace == namespace);
                edges.push(Edge {
                    from: NodeId {
                        layer: layer_index,
                        comb: comb_index,
                    },
                    to: match peer {
                        Some(comb) => EdgeTarget::Comb(NodeId {
                            layer: upstream,
                            comb,
                        }),
                        None => EdgeTarget::Layer(upstream),
                    },
                });
            }
        }
        Picture { layers, edges }
    }

    fn comb(&self, id: NodeId) -> &CombNode {
        &self.layers[id.layer].combs[id.comb]
    }
}

fn node(layer: &crate::config::Layer, comb: &Comb) -> CombNode {
    let status = comb.status.as_ref();
    let upstream = status.and_then(|status| status.upstream.as_ref());
    let namespace = comb.metadata.namespace.clone().unwrap_or_default();
    let name = comb.metadata.name.clone().unwrap_or_default();
    CombNode {
        stub: layer.stubs_comb(&namespace, &name),
        namespace,
        name,
        phase: status
            .and_then(|status| status.phase.as_ref())
            .map(ToString::to_string),
        reason: status
            .and_then(CombStatus::ready)
            .and_then(|ready| ready.reason.as_ref())
            .map(ToString::to_string),
        upstream: upstream.and_then(|upstream| {
            upstream.context.clone().or_else(|| {
                upstream.class.as_deref().map(|class| {
                    class
                        .strip_prefix("Kubernetes::Comb::Upstream::")
                        .unwrap_or(class)
                        .to_string()
                })
            })
        }),
        via: upstream
            .and_then(|upstream| upstream.via.clone())
            .unwrap_or_default(),
    }
}

/// The layer a Comb of layer `from` borrows from through kube context `context`, and the peer's
/// namespace there. Several layers may share a context's server; the layer's own `borrow.from`
/// decides among them, else the one that manages the Comb's namespace. `None`: no layer has
/// that context (a Static upstream, or a context outside the federation).
fn upstream_layer(
    config: &Config,
    from: usize,
    context: &str,
    namespace: &str,
) -> Option<(usize, String)> {
    let candidates: Vec<usize> = (0..config.layers.len())
        .filter(|&index| index != from && config.layers[index].context == context)
        .collect();
    if let Some(borrow) = &config.layers[from].borrow
        && let Some(&index) = candidates
            .iter()
            .find(|&&index| config.layers[index].name == borrow.from)
    {
        let namespace = borrow.namespace.clone().unwrap_or(namespace.to_string());
        return Some((index, namespace));
    }
    // A borrower on a fallback of its layer's chain: the peer there.
    let fallbacks = config.layers[from]
        .borrow
        .iter()
        .filter_map(|borrow| borrow.fallback.as_ref())
        .flat_map(|fallback| &fallback.to);
    for entry in fallbacks {
        if let crate::engine::borrow::Candidate::Layer(name) = entry
            && let Some(&index) = candidates
                .iter()
                .find(|&&index| config.layers[index].name == *name)
            && let Some((_, namespace)) =
                config.peer_up_the_chain(&config.layers[from], namespace, name)
        {
            return Some((index, namespace));
        }
    }
    candidates
        .iter()
        .find(|&&index| config.layers[index].manages(namespace))
        .or(candidates.first())
        .map(|&index| (index, namespace.to_string()))
}

/// `Running (Healthy)`, `Pending`, or `no status yet`.
fn phase_text(comb: &CombNode) -> String {
    match (&comb.phase, &comb.reason) {
        (Some(phase), Some(reason)) => format!("{phase} ({reason})"),
        (Some(phase), None) => phase.clone(),
        (None, _) => "no status yet".to_string(),
    }
}

/// The second line of a Comb's label: where it is served from, if not here.
fn served_text(comb: &CombNode) -> Option<String> {
    if !comb.via.is_empty() {
        Some(format!("via {}", comb.via.join(", ")))
    } else if comb.stub {
        Some("stub".to_string())
    } else {
        comb.upstream
            .as_ref()
            .map(|upstream| format!("upstream {upstream}"))
    }
}

/// Graphviz DOT: a cluster per layer, a node per Comb, an edge per borrow.
pub fn to_dot(picture: &Picture) -> String {
    let quote = |text: &str| {
        format!(
            "\"{}\"",
            text.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        )
    };
    let id =
        |layer: &str, comb: &CombNode| quote(&format!("{layer}/{}/{}", comb.namespace, comb.name));
    let mut out =
        String::from("digraph comb {\n  rankdir=RL;\n  node [shape=box, style=rounded];\n");
    for (index, layer) in picture.layers.iter().enumerate() {
        let mut label = format!("{} (context {})", layer.name, layer.context);
        if let Some(error) = &layer.error {
            let _ = write!(label, "\n{error}");
        }
        let _ = writeln!(
            out,
            "  subgraph cluster_{index} {{\n    label={};",
            quote(&label)
        );
        if layer.combs.is_empty() {
            let _ = writeln!(
                out,
                "    {} [shape=plaintext, label=\"no Combs\"];",
                quote(&layer.name)
            );
        }
        for comb in &layer.combs {
            let mut label = format!("{}/{}\n{}", comb.namespace, comb.name, phase_text(comb));
            if let Some(served) = served_text(comb) {
                let _ = write!(label, "\n{served}");
            }
            let _ = writeln!(
                out,
                "    {} [label={}];",
                id(&layer.name, comb),
                quote(&label)
            );
        }
        out.push_str("  }\n");
    }
    for edge in &picture.edges {
        let from = id(
            &picture.layers[edge.from.layer].name,
            picture.comb(edge.from),
        );
        let to = match &edge.to {
            EdgeTarget::Comb(peer) => id(&picture.layers[peer.layer].name, picture.comb(*peer)),
            EdgeTarget::Layer(layer) => quote(&picture.layers[*layer].name),
        };
        let _ = writeln!(out, "  {from} -> {to} [label=\"borrows\"];");
    }
    out.push_str("}\n");
    out
}

/// Mermaid flowchart: a subgraph per layer, a node per Comb, an edge per borrow.
pub fn to_mermaid(picture: &Picture) -> String {
    let text = |text: &str| text.replace('"', "#quot;");
    let node_id = |id: NodeId| format!("c{}_{}", id.layer, id.comb);
    let mut out = String::from("flowchart RL\n");
    for (index, layer) in picture.layers.iter().enumerate() {
        let mut title = format!("{} (context {})", layer.name, layer.context);
        if let Some(error) = &layer.error {
            let _ = write!(title, ": {error}");
        }
        let _ = writeln!(out, "  subgraph l{index}[\"{}\"]", text(&title));
        if layer.combs.is_empty() {
            let _ = writeln!(out, "    l{index}_empty[\"no Combs\"]");
        }
        for (comb_index, comb) in layer.combs.iter().enumerate() {
            let mut label = format!("{}/{}<br/>{}", comb.namespace, comb.name, phase_text(comb));
            if let Some(served) = served_text(comb) {
                let _ = write!(label, "<br/>{served}");
            }
            let id = node_id(NodeId {
                layer: index,
                comb: comb_index,
            });
            let _ = writeln!(out, "    {id}[\"{}\"]", text(&label));
        }
        out.push_str("  end\n");
    }
    for edge in &picture.edges {
        let to = match &edge.to {
            EdgeTarget::Comb(peer) => node_id(*peer),
            EdgeTarget::Layer(layer) => format!("l{layer}"),
        };
        let _ = writeln!(out, "  {} -->|borrows| {to}", node_id(edge.from));
    }
    out
}

const COLUMN_WIDTH: u32 = 260;
const COLUMN_GAP: u32 = 90;
const BOX_HEIGHT: u32 = 64;
const BOX_GAP: u32 = 18;
const HEADER: u32 = 56;
const MARGIN: u32 = 20;

/// Where a Comb's box is: its top-left corner.
fn box_at(id: NodeId) -> (u32, u32) {
    (
        MARGIN + id.layer as u32 * (COLUMN_WIDTH + COLUMN_GAP),
        MARGIN + HEADER + id.comb as u32 * (BOX_HEIGHT + BOX_GAP),
    )
}

/// The colour of a phase, as fill and stroke.
fn phase_colours(phase: Option<&str>) -> (&'static str, &'static str) {
    match phase {
        Some("Running") => ("#e6f4ea", "#1e8e3e"),
        Some("Pending") => ("#fef7e0", "#f9ab00"),
        Some("Error") => ("#fce8e6", "#d93025"),
        Some("Blocked") => ("#f3e8fd", "#9334e6"),
        _ => ("#f1f3f4", "#80868b"),
    }
}

/// Text for HTML and SVG.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The SVG drawing: a column per layer, a box per Comb coloured by phase, a curve per borrow
/// from the borrower's box to its peer's (or to the upstream layer's heading).
pub fn to_svg(picture: &Picture) -> String {
    let rows = picture
        .layers
        .iter()
        .map(|layer| layer.combs.len().max(1) as u32)
        .max()
        .unwrap_or(1);
    let columns = picture.layers.len().max(1) as u32;
    let width = 2 * MARGIN + columns * COLUMN_WIDTH + (columns - 1) * COLUMN_GAP;
    let height = 2 * MARGIN + HEADER + rows * (BOX_HEIGHT + BOX_GAP);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"layers, Combs and borrow edges\">\n\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" \
         markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#5f6368\"/>\
         </marker></defs>\n"
    );
    for (index, layer) in picture.layers.iter().enumerate() {
        let x = MARGIN + index as u32 * (COLUMN_WIDTH + COLUMN_GAP);
        let _ = writeln!(
            out,
            "<g class=\"layer\"><rect x=\"{x}\" y=\"{MARGIN}\" width=\"{COLUMN_WIDTH}\" height=\"{}\" \
             rx=\"10\" fill=\"#fafafa\" stroke=\"#dadce0\"/>\
             <text x=\"{}\" y=\"{}\" class=\"layer-name\">{}</text>\
             <text x=\"{}\" y=\"{}\" class=\"context\">context {}</text>",
            height - 2 * MARGIN,
            x + 12,
            MARGIN + 24,
            escape(&layer.name),
            x + 12,
            MARGIN + 42,
            escape(&layer.context),
        );
        if let Some(error) = &layer.error {
            let _ = write!(
                out,
                "<text x=\"{}\" y=\"{}\" class=\"error\">{}</text>",
                x + 12,
                MARGIN + HEADER + 20,
                escape(error)
            );
        } else if layer.combs.is_empty() {
            let _ = write!(
                out,
                "<text x=\"{}\" y=\"{}\" class=\"context\">no Combs</text>",
                x + 12,
                MARGIN + HEADER + 20
            );
        }
        for (comb_index, comb) in layer.combs.iter().enumerate() {
            let (bx, by) = box_at(NodeId {
                layer: index,
                comb: comb_index,
            });
            let (fill, stroke) = phase_colours(comb.phase.as_deref());
            let _ = write!(
                out,
                "<g class=\"comb\"><rect x=\"{}\" y=\"{by}\" width=\"{}\" height=\"{BOX_HEIGHT}\" rx=\"8\" \
                 fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"2\"/>\
                 <text x=\"{}\" y=\"{}\" class=\"comb-name\">{}</text>\
                 <text x=\"{}\" y=\"{}\" class=\"phase\">{}</text>",
                bx + 10,
                COLUMN_WIDTH - 20,
                bx + 20,
                by + 20,
                escape(&format!("{}/{}", comb.namespace, comb.name)),
                bx + 20,
                by + 38,
                escape(&phase_text(comb)),
            );
            if let Some(served) = served_text(comb) {
                let _ = write!(
                    out,
                    "<text x=\"{}\" y=\"{}\" class=\"via\">{}</text>",
                    bx + 20,
                    by + 55,
                    escape(&served)
                );
            }
            out.push_str("</g>");
        }
        out.push_str("</g>\n");
    }
    for edge in &picture.edges {
        let (fx, fy) = box_at(edge.from);
        let (tx, ty) = match &edge.to {
            EdgeTarget::Comb(peer) => box_at(*peer),
            EdgeTarget::Layer(layer) => (
                MARGIN + *layer as u32 * (COLUMN_WIDTH + COLUMN_GAP),
                MARGIN + HEADER - BOX_HEIGHT / 2 - 8,
            ),
        };
        let (fy, ty) = (fy + BOX_HEIGHT / 2, ty + BOX_HEIGHT / 2);
        // From the borrower's near side to the peer's near side, whichever way they lie.
        let (start, end) = if tx < fx {
            (fx + 10, tx + COLUMN_WIDTH - 10)
        } else {
            (fx + COLUMN_WIDTH - 10, tx + 10)
        };
        let middle = (start + end) / 2;
        let _ = writeln!(
            out,
            "<path class=\"borrow\" d=\"M{start},{fy} C{middle},{fy} {middle},{ty} {end},{ty}\" \
             fill=\"none\" stroke=\"#5f6368\" stroke-width=\"2\" marker-end=\"url(#arrow)\"/>"
        );
    }
    out.push_str("</svg>\n");
    out
}

/// The admin address's status page: server-rendered, no script, refreshed by the browser
/// every `refresh_seconds`.
pub fn to_html(picture: &Picture, generated_at: &str, refresh_seconds: u32) -> String {
    let combs: usize = picture.layers.iter().map(|layer| layer.combs.len()).sum();
    let mut out = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"refresh\" content=\"{refresh_seconds}\">\n\
         <title>comb: {} layers, {combs} Combs</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 24px; color: #202124; }}\n\
         h1 {{ font-size: 20px; margin: 0 0 4px; }}\n\
         p.meta {{ color: #5f6368; margin: 0 0 16px; font-size: 13px; }}\n\
         svg text {{ font-family: sans-serif; }}\n\
         .layer-name {{ font-size: 17px; font-weight: bold; fill: #202124; }}\n\
         .context {{ font-size: 12px; fill: #5f6368; }}\n\
         .comb-name {{ font-size: 14px; font-weight: bold; fill: #202124; }}\n\
         .phase {{ font-size: 12px; fill: #3c4043; }}\n\
         .via {{ font-size: 11px; fill: #5f6368; }}\n\
         .error {{ font-size: 12px; fill: #d93025; }}\n\
         </style>\n</head>\n<body>\n<h1>comb federation</h1>\n\
         <p class=\"meta\">{} layers, {combs} Combs, {} borrow edges; as of {}; refreshed every {refresh_seconds}s</p>\n",
        picture.layers.len(),
        picture.layers.len(),
        picture.edges.len(),
        escape(generated_at),
    );
    out.push_str(&to_svg(picture));
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> Config {
        Config::from_yaml(
            "layers:
  - {name: prod, context: prod, namespaces: [platform]}
  - {name: staging, context: staging, namespaces: [staging], borrow: {from: prod, namespace: platform, combs: [db]}, stubs: [mailer]}
  - {name: dev, context: dev, namespaces: [platform], borrow: {from: staging, namespace: staging, combs: [db]}}
",
            "comb.yaml",
            None,
        )
        .expect("the configuration is valid")
    }

    fn comb(namespace: &str, name: &str, status: serde_json::Value) -> Comb {
        serde_json::from_value(json!({
            "apiVersion": "comb.internal/v1", "kind": "Comb",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"class": "Manifests"},
            "status": status,
        }))
        .expect("a Comb")
    }

    fn running(reason: &str) -> serde_json::Value {
        json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "reason": reason}]})
    }

    fn borrowed(context: &str, via: &[&str]) -> serde_json::Value {
        json!({"phase": "Running",
               "conditions": [{"type": "Ready", "status": "True", "reason": "Borrowed"}],
               "upstream": {"class": "Kubernetes::Comb::Upstream::K8s", "context": context, "via": via}})
    }

    fn picture() -> Picture {
        Picture::build(
            &config(),
            &[
                LayerCombs::Read(vec![
                    comb("platform", "db", running("Healthy")),
                    comb("platform", "mailer", running("Healthy")),
                ]),
                LayerCombs::Read(vec![
                    comb("staging", "db", borrowed("prod", &["prod"])),
                    comb("staging", "mailer", running("Healthy")),
                ]),
                LayerCombs::Read(vec![comb(
                    "platform",
                    "db",
                    borrowed("staging", &["staging", "prod"]),
                )]),
            ],
        )
    }

    #[test]
    fn edges_go_to_the_peer_in_the_layer_borrowed_from() {
        let picture = picture();
        assert_eq!(
            picture.edges,
            [
                Edge {
                    from: NodeId { layer: 1, comb: 0 },
                    to: EdgeTarget::Comb(NodeId { layer: 0, comb: 0 }),
                },
                Edge {
                    from: NodeId { layer: 2, comb: 0 },
                    to: EdgeTarget::Comb(NodeId { layer: 1, comb: 0 }),
                },
            ]
        );
        assert!(
            picture.layers[1].combs[1].stub,
            "staging builds mailer as its stub"
        );
    }

    #[test]
    fn a_borrower_on_fallback_points_at_the_fallbacks_peer() {
        let config = Config::from_yaml(
            "layers:
  - {name: prod, context: prod, namespaces: [platform]}
  - {name: staging, context: staging, namespaces: [staging], borrow: {from: prod, namespace: platform}}
  - {name: dev, context: dev, namespaces: [apps], borrow: {from: staging, namespace: staging, fallback: [prod]}}
",
            "comb.yaml",
            None,
        )
        .expect("the configuration is valid");
        let picture = Picture::build(
            &config,
            &[
                LayerCombs::Read(vec![comb("platform", "db", running("Healthy"))]),
                LayerCombs::Read(vec![comb("staging", "db", borrowed("prod", &["prod"]))]),
                LayerCombs::Read(vec![comb("apps", "db", borrowed("prod", &["prod"]))]),
            ],
        );
        assert_eq!(
            picture.edges[1],
            Edge {
                from: NodeId { layer: 2, comb: 0 },
                to: EdgeTarget::Comb(NodeId { layer: 0, comb: 0 }),
            },
            "dev's db on its fallback borrows prod's platform/db, past staging"
        );
    }

    #[test]
    fn a_peer_not_listed_points_at_its_layer_and_an_unread_layer_says_why() {
        let picture = Picture::build(
            &config(),
            &[
                LayerCombs::Unread("layer prod: the API server does not answer".to_string()),
                LayerCombs::Read(vec![comb("staging", "db", borrowed("prod", &["prod"]))]),
                LayerCombs::Read(vec![]),
            ],
        );
        assert_eq!(picture.edges[0].to, EdgeTarget::Layer(0));
        let dot = to_dot(&picture);
        assert!(dot.contains("\"staging/staging/db\" -> \"prod\""), "{dot}");
        assert!(dot.contains("the API server does not answer"), "{dot}");
        let html = to_html(&picture, "now", 5);
        assert!(
            html.contains("layer prod: the API server does not answer"),
            "{html}"
        );
        assert!(html.contains(">no Combs<"), "{html}");
    }

    #[test]
    fn dot_has_a_cluster_per_layer_and_an_edge_per_borrow() {
        let dot = to_dot(&picture());
        for expected in [
            "subgraph cluster_0 {\n    label=\"prod (context prod)\";",
            "\"dev/platform/db\" [label=\"platform/db\\nRunning (Borrowed)\\nvia staging, prod\"];",
            "\"staging/staging/mailer\" [label=\"staging/mailer\\nRunning (Healthy)\\nstub\"];",
            "\"dev/platform/db\" -> \"staging/staging/db\" [label=\"borrows\"];",
            "\"staging/staging/db\" -> \"prod/platform/db\" [label=\"borrows\"];",
        ] {
            assert!(dot.contains(expected), "{expected} in\n{dot}");
        }
    }

    #[test]
    fn mermaid_has_a_subgraph_per_layer_and_an_edge_per_borrow() {
        let mermaid = to_mermaid(&picture());
        for expected in [
            "flowchart RL\n  subgraph l0[\"prod (context prod)\"]\n",
            "    c2_0[\"platform/db<br/>Running (Borrowed)<br/>via staging, prod\"]\n",
            "  c2_0 -->|borrows| c1_0\n",
            "  c1_0 -->|borrows| c0_0\n",
        ] {
            assert!(mermaid.contains(expected), "{expected} in\n{mermaid}");
        }
    }

    #[test]
    fn the_page_draws_every_layer_comb_and_edge_and_escapes_names() {
        let mut picture = picture();
        picture.layers[0].combs[1].reason = Some("<script>".to_string());
        let html = to_html(&picture, "2026-12-01T12:00:00Z", 5);
        assert!(html.contains("<meta http-equiv=\"refresh\" content=\"5\">"));
        assert!(!html.contains("<script>"), "names are escaped");
        assert!(html.contains("Running (&lt;script&gt;)"));
        assert_eq!(html.matches("<g class=\"layer\">").count(), 3);
        assert_eq!(html.matches("<g class=\"comb\">").count(), 5);
        assert_eq!(html.matches("<path class=\"borrow\"").count(), 2);
        for name in [
            "prod",
            "staging",
            "dev",
            "platform/db",
            "staging/db",
            "staging/mailer",
        ] {
            assert!(html.contains(&format!(">{name}<")), "{name}");
        }
    }
}
