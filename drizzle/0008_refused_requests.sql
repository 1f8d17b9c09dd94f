CREATE TABLE `refused_requests` (
	`request_id` text PRIMARY KEY NOT NULL,
	`created_at` integer NOT NULL,
	`status` integer NOT NULL,
	`code` text,
	`message` text,
	`lane` text NOT NULL,
	`key_id` text,
	`model` text,
	`suppressed` integer DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE INDEX `refused_created_idx` ON `refused_requests` (`created_at`);--> statement-breakpoint
CREATE INDEX `refused_key_created_idx` ON `refused_requests` (`key_id`,`created_at`);