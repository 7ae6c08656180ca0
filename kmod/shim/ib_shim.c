// SPDX-License-Identifier: GPL-2.0
/*
 * The kernel RDMA core's side of iwarp.ko (src/ib/): the device container, the ops table whose
 * entries answer from what Rust gave at load, the rdma link type ("rdma link add NAME type
 * iwarp netdev DEV") and the netdev notifier. Which netdevs get a device, which events
 * unregister one, and the list of devices are Rust's (src/ib/link.rs); this file reaches what
 * Rust's bindings do not (ib_verbs.h, its static inlines and macros) and decides nothing.
 */
#include <linux/etherdevice.h>
#include <linux/if_arp.h>
#include <linux/module.h>
#include <linux/netdevice.h>
#include <net/addrconf.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_verbs.h>
#include <rdma/iw_cm.h>
#include <rdma/rdma_netlink.h>
#include <rdma/uverbs_ioctl.h>

#include "shim.h"

/* An iwarp.ko device of the RDMA core. */
struct iwarp_ibdev {
	struct ib_device base;
	/* Port 1's GID: the netdev's MAC when the device was made (as siw). */
	u8 raw_gid[ETH_ALEN];
};

static struct iwarp_ibdev *to_iwarp(struct ib_device *dev)
{
	return container_of(dev, struct iwarp_ibdev, base);
}

/* What Rust gave at registration; read-only afterwards. */
static struct iwarp_ib_limits iwarp_limits;
static const struct iwarp_ib_callbacks *iwarp_cb;

static int iwarp_query_device(struct ib_device *dev, struct ib_device_attr *attr, struct ib_udata *udata)
{
	int rv = ib_is_udata_in_empty(udata);

	if (rv)
		return rv;
	memset(attr, 0, sizeof(*attr));
	/* rdma link delete may unregister it. */
	attr->kernel_cap_flags = IBK_ALLOW_USER_UNREG;
	attr->max_mr_size = iwarp_limits.max_mr_size;
	attr->max_qp = iwarp_limits.max_qp;
	attr->max_qp_wr = iwarp_limits.max_qp_wr;
	attr->max_send_sge = iwarp_limits.max_sge;
	attr->max_recv_sge = iwarp_limits.max_sge;
	attr->max_sge_rd = 1;
	attr->max_cq = iwarp_limits.max_cq;
	attr->max_cqe = iwarp_limits.max_cqe;
	attr->max_mr = iwarp_limits.max_mr;
	attr->max_pd = iwarp_limits.max_pd;
	attr->max_qp_rd_atom = iwarp_limits.max_ird_ord;
	attr->max_qp_init_rd_atom = iwarp_limits.max_ird_ord;
	attr->page_size_cap = PAGE_SIZE;
	attr->vendor_part_id = 0;
	addrconf_addr_eui48((u8 *)&attr->sys_image_guid, to_iwarp(dev)->raw_gid);
	return ib_respond_empty_udata(udata);
}

static int iwarp_query_port(struct ib_device *dev, u32 port, struct ib_port_attr *attr)
{
	struct net_device *ndev;
	int rv;

	memset(attr, 0, sizeof(*attr));
	rv = ib_get_eth_speed(dev, port, &attr->active_speed, &attr->active_width);
	if (rv)
		return rv;
	ndev = ib_device_get_netdev(dev, port);
	if (!ndev)
		return -ENODEV;
	attr->gid_tbl_len = 1;
	attr->max_msg_sz = iwarp_limits.max_message;
	attr->max_mtu = ib_mtu_int_to_enum(ndev->max_mtu);
	attr->active_mtu = ib_mtu_int_to_enum(READ_ONCE(ndev->mtu));
	attr->state = ib_get_curr_port_state(ndev);
	attr->phys_state = attr->state == IB_PORT_ACTIVE ? IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
	attr->port_cap_flags = IB_PORT_CM_SUP | IB_PORT_DEVICE_MGMT_SUP;
	dev_put(ndev);
	return 0;
}

static int iwarp_get_port_immutable(struct ib_device *dev, u32 port, struct ib_port_immutable *immutable)
{
	struct ib_port_attr attr;
	int rv = iwarp_query_port(dev, port, &attr);

	if (rv)
		return rv;
	immutable->gid_tbl_len = attr.gid_tbl_len;
	immutable->core_cap_flags = RDMA_CORE_PORT_IWARP;
	return 0;
}

static int iwarp_query_gid(struct ib_device *dev, u32 port, int idx, union ib_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	memcpy(gid->raw, to_iwarp(dev)->raw_gid, ETH_ALEN);
	return 0;
}

static void iwarp_dealloc_driver(struct ib_device *dev)
{
	iwarp_cb->gone(dev);
}

static const struct ib_device_ops iwarp_ib_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.dealloc_driver = iwarp_dealloc_driver,
	.get_port_immutable = iwarp_get_port_immutable,
	.query_device = iwarp_query_device,
	.query_gid = iwarp_query_gid,
	.query_port = iwarp_query_port,
};

bool iwarp_shim_netdev_is_ethernet(const struct net_device *ndev)
{
	return ndev->type == ARPHRD_ETHER;
}

struct ib_device *iwarp_shim_ib_device_create(struct net_device *ndev)
{
	struct iwarp_ibdev *idev = ib_alloc_device(iwarp_ibdev, base);
	struct ib_device *dev;
	int rv;

	if (!idev)
		return ERR_PTR(-ENOMEM);
	dev = &idev->base;
	memcpy(idev->raw_gid, ndev->dev_addr, min_t(unsigned int, ndev->addr_len, ETH_ALEN));
	addrconf_addr_eui48((u8 *)&dev->node_guid, idev->raw_gid);
	dev->node_type = RDMA_NODE_RNIC;
	strscpy(dev->node_desc, "iwarp.ko", sizeof(dev->node_desc));
	dev->phys_port_cnt = 1;
	dev->num_comp_vectors = 1;
	ib_set_device_ops(dev, &iwarp_ib_ops);
	rv = ib_device_set_netdev(dev, ndev, 1);
	if (rv) {
		ib_dealloc_device(dev);
		return ERR_PTR(rv);
	}
	memcpy(dev->iw_ifname, ndev->name, sizeof(dev->iw_ifname));
	/* Our connections use the ports their callers give (no iwpmd). */
	dev->iw_driver_flags = IW_F_NO_PORT_MAP;
	return dev;
}

int iwarp_shim_ib_device_register(struct ib_device *dev, const char *name)
{
	ib_mark_name_assigned_by_user(dev);
	return ib_register_device(dev, name, NULL);
}

/* Undoes iwarp_shim_ib_device_create() when registering failed. */
void iwarp_shim_ib_device_free(struct ib_device *dev)
{
	ib_dealloc_device(dev);
}

/* Keeps @dev's memory until iwarp_shim_ib_device_drop() or _unregister_and_drop(). */
void iwarp_shim_ib_device_hold(struct ib_device *dev)
{
	get_device(&dev->dev);
}

void iwarp_shim_ib_device_drop(struct ib_device *dev)
{
	put_device(&dev->dev);
}

/*
 * Unregisters @dev (held) and waits for it: when this returns, it is gone, whether this call
 * or a queued one unregistered it (as ib_unregister_driver() does for a driver id).
 */
void iwarp_shim_ib_device_unregister_and_drop(struct ib_device *dev)
{
	ib_unregister_device(dev);
	put_device(&dev->dev);
}

bool iwarp_shim_ib_device_unregister_queued(struct ib_device *dev)
{
	if (!ib_device_try_get(dev))
		return false;
	ib_unregister_device_queued(dev);
	ib_device_put(dev);
	return true;
}

void iwarp_shim_ib_port_event(struct ib_device *dev, bool active)
{
	struct ib_event event = {
		.device = dev,
		.event = active ? IB_EVENT_PORT_ACTIVE : IB_EVENT_PORT_ERR,
		.element.port_num = 1,
	};

	if (!ib_device_try_get(dev))
		return;
	ib_dispatch_event(&event);
	ib_device_put(dev);
}

static int iwarp_newlink(const char *name, struct net_device *ndev)
{
	return iwarp_cb->newlink(name, ndev);
}

static struct rdma_link_ops iwarp_link_ops = {
	.type = "iwarp",
	.newlink = iwarp_newlink,
};

static int iwarp_netdev_event(struct notifier_block *nb, unsigned long event, void *arg)
{
	struct net_device *ndev = netdev_notifier_info_to_dev(arg);
	enum iwarp_netdev_event what;

	switch (event) {
	case NETDEV_UP:
		what = IWARP_NETDEV_UP;
		break;
	case NETDEV_DOWN:
		what = IWARP_NETDEV_DOWN;
		break;
	case NETDEV_UNREGISTER:
		what = IWARP_NETDEV_UNREGISTER;
		break;
	default:
		return NOTIFY_OK;
	}
	iwarp_cb->netdev_event(ndev, what);
	return NOTIFY_OK;
}

static struct notifier_block iwarp_netdev_nb = {
	.notifier_call = iwarp_netdev_event,
};

int iwarp_shim_ib_register(const struct iwarp_ib_callbacks *cb, const struct iwarp_ib_limits *limits)
{
	int rv;

	iwarp_limits = *limits;
	iwarp_cb = cb;
	rv = register_netdevice_notifier(&iwarp_netdev_nb);
	if (rv)
		return rv;
	rdma_link_register(&iwarp_link_ops);
	return 0;
}

void iwarp_shim_ib_unregister(void)
{
	/* Waits for a newlink in progress; none starts after. */
	rdma_link_unregister(&iwarp_link_ops);
	unregister_netdevice_notifier(&iwarp_netdev_nb);
}

MODULE_ALIAS_RDMA_LINK("iwarp");
