"""Many servers: the PromQL of the console's figures written once (:mod:`.promql`), the Prometheus rules and the
Grafana board made from it (:mod:`.rules`, :mod:`.board`), the fleet view read from a Prometheus (:mod:`.query`),
and the Kubernetes manifests of ``qaic-console deploy k8s`` (:mod:`.manifests`)."""
