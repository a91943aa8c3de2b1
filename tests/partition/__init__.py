"""Jepsen-style runs on a Galera cluster whose nodes live in network namespaces (issue 40).

``netns`` builds and cuts the network, ``cluster`` runs a mariadbd in each
namespace, ``history`` records every client call, ``checker`` (pure) reads the
history and the final rows, ``load`` drives the product and ``run`` ties a
fault schedule to all of them (``scripts/jepsen.sh``).
"""
