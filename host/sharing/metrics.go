package sharing

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffscan/ffscan/keys"
)

// Collector exports a coordinator's view as metrics, read from Status at
// each scrape (so a scrape always shows the share as it stands, whatever
// the store):
//
//   - ffscan_sharing_info{store,host_id} 1: where this host shares.
//   - ffscan_sharing_hosts: the live hosts of the share.
//   - ffscan_sharing_owned_partitions{family}: the partitions this host
//     owns now (its fencing view); ffscan_sharing_partitions{family} how
//     many there are.
//   - ffscan_sharing_valid_seconds: how long the owned set stays valid
//     without another renewal (0: this host owns nothing now).
//   - ffscan_sharing_renewals_total{outcome="ok"|"failed"}: ticks.
//   - ffscan_sharing_ownership_changes_total: changes of the owned set.
type Collector struct {
	c                                *Coordinator
	info, hosts, owned, total, valid *prometheus.Desc
	renewals, changes                *prometheus.Desc
	families                         []keys.Family
	counts                           map[keys.Family]int
}

// NewCollector returns c's collector; register it on the host's registry.
func NewCollector(c *Coordinator) *Collector {
	fams := []keys.Family{keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota}
	counts := map[keys.Family]int{}
	for _, f := range fams {
		counts[f] = len(c.cfg.Partitions.Partitions(f))
	}
	return &Collector{
		c:        c,
		families: fams,
		counts:   counts,
		info: prometheus.NewDesc("ffscan_sharing_info",
			"Where this host shares the partitions (store: valkey, or postgres with the filter of its share).", []string{"store", "host_id"}, nil),
		hosts: prometheus.NewDesc("ffscan_sharing_hosts", "Live hosts of this host's share, itself included.", nil, nil),
		owned: prometheus.NewDesc("ffscan_sharing_owned_partitions",
			"Partitions this host owns now (its fencing view), by family.", []string{"family"}, nil),
		total: prometheus.NewDesc("ffscan_sharing_partitions", "Partitions of the deployment, by family.", []string{"family"}, nil),
		valid: prometheus.NewDesc("ffscan_sharing_valid_seconds",
			"How long this host's owned set stays valid without another renewal (0: it owns nothing now).", nil, nil),
		renewals: prometheus.NewDesc("ffscan_sharing_renewals_total",
			"Ticks renewing membership and ownership, by outcome (ok, failed).", []string{"outcome"}, nil),
		changes: prometheus.NewDesc("ffscan_sharing_ownership_changes_total", "Changes of the set of partitions this host owns.", nil, nil),
	}
}

// Describe sends the descriptors.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.info, m.hosts, m.owned, m.total, m.valid, m.renewals, m.changes} {
		ch <- d
	}
}

// Collect reads the coordinator's status.
func (m *Collector) Collect(ch chan<- prometheus.Metric) {
	st := m.c.Status()
	ch <- prometheus.MustNewConstMetric(m.info, prometheus.GaugeValue, 1, st.Store, st.ID)
	ch <- prometheus.MustNewConstMetric(m.hosts, prometheus.GaugeValue, float64(len(st.Members)))
	for _, f := range m.families {
		ch <- prometheus.MustNewConstMetric(m.owned, prometheus.GaugeValue, float64(st.Owned[f]), f.String())
		ch <- prometheus.MustNewConstMetric(m.total, prometheus.GaugeValue, float64(m.counts[f]), f.String())
	}
	ch <- prometheus.MustNewConstMetric(m.valid, prometheus.GaugeValue, st.ValidFor.Seconds())
	ch <- prometheus.MustNewConstMetric(m.renewals, prometheus.CounterValue, float64(st.Ticks), "ok")
	ch <- prometheus.MustNewConstMetric(m.renewals, prometheus.CounterValue, float64(st.Failures), "failed")
	ch <- prometheus.MustNewConstMetric(m.changes, prometheus.CounterValue, float64(st.Changes))
}
