// SPDX-License-Identifier: GPL-2.0
/*
 * Spinlocks that keep bottom halves off while held (src/sync.rs): the receive side runs in the
 * socket's softirq callbacks and shares its state with process context. And ones that keep
 * interrupts off, for what callers with interrupts off reach. And bottom halves off without a
 * lock, for accesses to a region's pages that its invalidation spins on.
 */
#include <linux/bottom_half.h>
#include <linux/spinlock.h>

#include "shim.h"

void iwarp_shim_spin_lock_bh(spinlock_t *lock)
{
	spin_lock_bh(lock);
}

int iwarp_shim_spin_trylock_bh(spinlock_t *lock)
{
	return spin_trylock_bh(lock);
}

void iwarp_shim_spin_unlock_bh(spinlock_t *lock)
{
	spin_unlock_bh(lock);
}

void iwarp_shim_local_bh_disable(void)
{
	local_bh_disable();
}

void iwarp_shim_local_bh_enable(void)
{
	local_bh_enable();
}

unsigned long iwarp_shim_spin_lock_irqsave(spinlock_t *lock)
{
	unsigned long flags;

	spin_lock_irqsave(lock, flags);
	return flags;
}

int iwarp_shim_spin_trylock_irqsave(spinlock_t *lock, unsigned long *flags)
{
	return spin_trylock_irqsave(lock, *flags);
}

void iwarp_shim_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags)
{
	spin_unlock_irqrestore(lock, flags);
}

void iwarp_shim_spin_assert_held(spinlock_t *lock)
{
	lockdep_assert_held(lock);
}
