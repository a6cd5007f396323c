//! comb-upstreams: the places a Comb can borrow its service from.
