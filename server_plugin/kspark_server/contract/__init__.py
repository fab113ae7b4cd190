"""The parts of the operator-spec contract, one module each; import them from
:mod:`kspark_server.spec`, the contract's one name."""
